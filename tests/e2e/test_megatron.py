"""strategy=megatron end to end through main_ppo on CPU, on the default task (two-digit addition, exact
match): the demo's SFT warm start (FSDP2), then, with two Ray workers each,

- GRPO with a tensor-parallel actor (TP=2, sequence parallel), the demo's RL settings;
- PPO (GAE) with a pipeline-parallel actor and a Megatron critic (PP=2 over the 3-layer model: an
  uneven split, 2 + 1 layers).

The reward must rise: held-out greedy exact match from before RL to after 30 steps (measured here:
30.8% -> 45.2% after 60 GRPO steps, 30.8% -> 42.3% after 30 PPO steps, machine loaded), and the mean
training reward of the last 10 steps above that of the first 10.
"""

import json
import math

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SFT_STEPS = 180  # the demo's warm start
STEPS = 30


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
        f"trainer.test_freq={STEPS}", "trainer.logger=[jsonl]", "trainer.progress_bar=false",
        "actor_rollout_ref.actor.strategy=megatron", *overrides,
    ]
    cfg = load_config(args)
    validate_config(cfg)
    run_ppo(cfg)
    rows = [json.loads(line) for line in open(out / "metrics.jsonl")]
    train = [r for r in rows if "critic/score/mean" in r]
    val = [(r["step"], r["val/arithmetic/reward"]) for r in rows if "val/arithmetic/reward" in r]
    assert [r["step"] for r in train] == list(range(1, STEPS + 1))
    assert [step for step, _ in val] == [0, STEPS]
    return train, val


def _assert_reward_rises(train, val):
    scores = [r["critic/score/mean"] for r in train]
    # From the demo's warm start, 30 steps lift held-out greedy accuracy by a few prompts only (FSDP2 gives
    # the same numbers as Megatron TP=2), so the check is the direction of both signals: held-out accuracy
    # rises and the sampled training reward's last ten steps beat its first ten.
    assert val[-1][1] > val[0][1], (val, scores)
    assert sum(scores[-10:]) > sum(scores[:10]), scores


def test_grpo_with_a_tensor_parallel_megatron_actor(warm_model, task_data, tmp_path):
    train, val = _run(task_data, warm_model, tmp_path, "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2")
    assert all(math.isfinite(r["actor/pg_loss"]) and r["actor/grad_norm"] > 0 for r in train)
    # the rollout's log-probs (the HF copy, refreshed after every update) are the old log-probs: the
    # first mini-batch's ratio is 1 up to float rounding when the copy holds the Megatron weights
    assert all(abs(r["actor/ppo_kl"]) < 1e-5 for r in train)
    _assert_reward_rises(train, val)


def test_ppo_with_pipeline_parallel_megatron_actor_and_critic(warm_model, task_data, tmp_path):
    pp2 = "megatron.pipeline_model_parallel_size=2"
    train, val = _run(
        task_data, warm_model, tmp_path, "algorithm.adv_estimator=gae", "algorithm.lam=0.95",
        f"actor_rollout_ref.actor.{pp2}", f"critic.{pp2}", "critic.model.enable_gradient_checkpointing=false",
        "critic.optim.lr=1e-3", "critic.ppo_micro_batch_size_per_gpu=16",
    )
    for r in train:
        assert r["critic/grad_norm"] > 0 and r["actor/grad_norm"] > 0
        assert math.isfinite(r["critic/vf_loss"]) and math.isfinite(r["critic/vf_explained_var"])
    _assert_reward_rises(train, val)
