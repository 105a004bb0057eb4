"""Issue 13: a run is a function of its config and seeds. Through main_ppo.run_ppo, the Ray backend and
2 FSDP2 workers on CPU (sampled rollouts, shuffled data, GRPO): the same config twice writes the same
metrics.jsonl values and the same rollout dump; another trainer.seed writes different ones.

Compared: every metric except the wall-clock ones, ``timing_s/*``, ``timing_per_token_ms/*``,
``perf/time_per_step`` and ``perf/throughput`` (tokens per second), which measure the machine, not the
run. (``rollout.seed`` alone changes the samples: tests/rollout/test_rollout_seed.py.)
"""

import json

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

WALL_CLOCK_PREFIXES = ("timing_s/", "timing_per_token_ms/", "perf/time_per_step", "perf/throughput")


def _run(tmp_path, model_path, name, *overrides):
    from verl.trainer.config import load_config, validate_config
    from verl.trainer.main_ppo import run_ppo
    from verl.utils.dataset import write_parquet
    from verl.utils.dataset.tasks import make_arithmetic_rows

    train = write_parquet(make_arithmetic_rows(8, seed=0, digits=1, split="train"), tmp_path / "train.parquet")
    test = write_parquet(make_arithmetic_rows(4, seed=0, digits=1, split="test"), tmp_path / "test.parquet")
    out = tmp_path / name
    cfg = load_config([
        f"data.train_files={train}", f"data.val_files={test}", "data.train_batch_size=2",
        "data.max_prompt_length=32", "data.max_response_length=4", "data.shuffle=true",
        f"actor_rollout_ref.model.path={model_path}", "actor_rollout_ref.model.enable_gradient_checkpointing=false",
        "algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.n=2",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2", "actor_rollout_ref.actor.optim.lr=0.001",
        "actor_rollout_ref.rollout.calculate_log_probs=true", "actor_rollout_ref.actor.use_rollout_log_probs=true",
        "trainer.device=cpu", "trainer.nnodes=1", "trainer.n_gpus_per_node=2", "trainer.total_training_steps=2",
        "trainer.logger=[jsonl]", "trainer.val_before_train=false", "trainer.test_freq=2", "trainer.save_freq=-1",
        "trainer.progress_bar=false", f"trainer.default_local_dir={out}", f"trainer.rollout_data_dir={out / 'rollouts'}",
        *overrides,
    ])
    validate_config(cfg)
    run_ppo(cfg)
    rows = [json.loads(line) for line in open(out / "metrics.jsonl")]
    kept = [{k: v for k, v in r.items() if not k.startswith(WALL_CLOCK_PREFIXES)} for r in rows]
    dumps = [(out / "rollouts" / f"{s}.jsonl").read_text() for s in (1, 2)]
    return kept, dumps


def test_same_seed_same_metrics_other_seed_other_metrics(ray_cluster, tmp_path, tiny_model_dir):
    first, first_dumps = _run(tmp_path, tiny_model_dir, "a")
    again, again_dumps = _run(tmp_path, tiny_model_dir, "b")
    other, other_dumps = _run(tmp_path, tiny_model_dir, "c", "trainer.seed=2")
    assert [r["step"] for r in first] == [1, 2]
    assert "actor/pg_loss" in first[0] and "val/arithmetic/reward" in first[1]
    assert first == again  # values, not only keys
    assert first_dumps == again_dumps  # the same prompts, sampled responses and scores
    assert other != first and other_dumps != first_dumps
