"""The reward loop end to end through ``main_ppo``'s trainer: GRPO on the tiny model with the sandboxed
code reward (benchmarks/reward_loop.py's task: the addition prompts as stdio programs), generation in 2
chunks each scored while the next generates; every dumped sample's score and verdict is what the code
scorer gives that response in one pass."""

import importlib.util
import json
from pathlib import Path

import pytest
from verl.trainer.config import load_config

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "reward_loop.py"
STEPS = 2


def _bench():
    spec = importlib.util.spec_from_file_location("bench_reward_loop", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_grpo_with_the_reward_loop_and_the_sandboxed_code_reward(train_logged, tiny_chat_model, tmp_path):
    data = _bench().write_code_task(tmp_path / "data", cases=2)
    out = tmp_path / "run"
    cfg = load_config([
        f"data.train_files={data['train']}", f"data.val_files={data['test']}",
        f"actor_rollout_ref.model.path={tiny_chat_model}",
        "actor_rollout_ref.model.enable_gradient_checkpointing=false",
        "data.max_prompt_length=48", "data.max_response_length=8", "data.train_batch_size=4",
        "actor_rollout_ref.rollout.n=2", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4",
        "actor_rollout_ref.rollout.temperature=1.5",
        "reward_model.use_reward_loop=true", "reward.reward_loop_chunks=2", "reward.num_workers=4",
        "reward.sandbox.timeout=10",
        "trainer.device=cpu", "trainer.nnodes=1", "trainer.n_gpus_per_node=2",
        f"trainer.total_training_steps={STEPS}", "trainer.test_freq=-1", "trainer.val_before_train=false",
        "trainer.logger=[jsonl]", "trainer.progress_bar=false", f"trainer.default_local_dir={out}",
        f"trainer.rollout_data_dir={out / 'rollouts'}",
        "trainer.project_name=e2e", "trainer.experiment_name=reward_loop", "trainer.resume_mode=disable",
    ])  # fmt: skip
    assert cfg.reward.use_reward_loop  # upstream's spelling, translated
    train = train_logged(cfg)
    assert [r["step"] for r in train] == list(range(1, STEPS + 1))
    assert all(r["reward_loop/chunks"] == 2 and "reward_loop/overlapped_chunks" in r for r in train)

    from verl.rewards.scoring import default_compute_score

    for step in range(1, STEPS + 1):
        samples = [json.loads(line) for line in open(out / "rollouts" / f"{step}.jsonl")]
        assert len(samples) == 8
        for s in samples:
            again = default_compute_score("apps", s["output"], s["gts"], sandbox="local",
                                          sandbox_options={"timeout": 10, "memory_mb": 1024})  # fmt: skip
            assert (s["score"], s["verdict"], s["num_tests"]) == (again["score"], again["verdict"], 2), s
