"""strategy=megatron end to end through main_ppo on CPU: the default task (two-digit addition), the
demo's SFT warm start, then GRPO with a tensor-parallel actor (TP=2) and PPO with a pipeline-parallel
actor and Megatron critic (PP=2), two Ray workers each; the training reward must rise.

Reward rises are judged on the mean exact-match score of the first and last steps of each run (each
step scores 16 prompts x 8 samples); the warm start leaves the model at roughly a third of the problems.
"""

import json

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SFT_STEPS = 180  # the demo's warm start
STEPS = 20
WINDOW = 5  # steps averaged at each end


@pytest.fixture(scope="module")
def warm_model(ray_cluster, task_data, tmp_path_factory):
    from verl.trainer.demo import build_model, sft_args
    from verl.trainer.sft import load_sft_config, validate_sft_config
    from verl.trainer.sft_trainer import run_sft

    out = tmp_path_factory.mktemp("megatron_sft")
    cfg = load_sft_config(sft_args(build_model(out / "base"), task_data, out / "sft", SFT_STEPS, 2))
    validate_sft_config(cfg)
    return run_sft(cfg)["hf_model"]


def _run(task_data, model, out, *overrides):
    from verl.trainer.config import load_config, validate_config
    from verl.trainer.demo import rl_args
    from verl.trainer.main_ppo import run_ppo

    args = rl_args(model, task_data, out, STEPS, 2) + [
        "trainer.val_before_train=false", "trainer.test_freq=-1", "trainer.logger=[jsonl]",
        "trainer.progress_bar=false", "actor_rollout_ref.actor.optim.lr=2e-4",
        "actor_rollout_ref.actor.strategy=megatron", *overrides,
    ]
    cfg = load_config(args)
    validate_config(cfg)
    run_ppo(cfg)
    rows = [json.loads(line) for line in open(out / "metrics.jsonl")]
    return [r for r in rows if "critic/score/mean" in r]


def _rise(train):
    scores = [r["critic/score/mean"] for r in train]
    return sum(scores[-WINDOW:]) / WINDOW - sum(scores[:WINDOW]) / WINDOW


def test_grpo_with_a_tensor_parallel_megatron_actor(warm_model, task_data, tmp_path):
    train = _run(task_data, warm_model, tmp_path, "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2")
    assert [r["step"] for r in train] == list(range(1, STEPS + 1))
    assert all(r["actor/grad_norm"] > 0 for r in train)
    assert _rise(train) > 0.05, [round(r["critic/score/mean"], 3) for r in train]


def test_ppo_with_pipeline_parallel_megatron_actor_and_critic(warm_model, task_data, tmp_path):
    pp2 = "megatron.pipeline_model_parallel_size=2"
    train = _run(
        task_data, warm_model, tmp_path, "algorithm.adv_estimator=gae", "algorithm.lam=0.95",
        f"actor_rollout_ref.actor.{pp2}", f"critic.{pp2}", f"critic.model.path={warm_model}",
        "critic.model.enable_gradient_checkpointing=false", "critic.optim.lr=1e-3",
        "critic.ppo_micro_batch_size_per_gpu=16",
    )
    assert [r["step"] for r in train] == list(range(1, STEPS + 1))
    assert all(r["critic/grad_norm"] > 0 and r["actor/grad_norm"] > 0 for r in train)
    # the value head learns: its loss falls from the untrained head's
    assert train[-1]["critic/vf_loss"] < train[0]["critic/vf_loss"]
    assert _rise(train) > 0.05, [round(r["critic/score/mean"], 3) for r in train]
