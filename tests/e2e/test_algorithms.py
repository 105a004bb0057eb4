"""Each algorithm, chosen by config only, runs end to end on the built-in task at tiny size: Ray single
controller, two FSDP2 CPU workers, HF rollout, the verl-rewards exact-match scorer."""

import math
from pathlib import Path

import pytest
from verl.trainer.config import load_config

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

STEPS = 3
# The default task's data with a shaped scorer: a random-init model scores exactly 0 under exact match,
# which would make every advantage 0 and leave nothing to check (the default-pipeline test uses exact match).
SHAPED_REWARD = Path(__file__).with_name("shaped_reward.py")

ALGORITHMS = {
    "grpo": ["algorithm.adv_estimator=grpo"],
    "dr_grpo": ["algorithm.adv_estimator=grpo", "algorithm.norm_adv_by_std_in_grpo=false",
                "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-sum-norm"],
    "rloo": ["algorithm.adv_estimator=rloo"],
    "reinforce_plus_plus": ["algorithm.adv_estimator=reinforce_plus_plus"],
    "remax": ["algorithm.adv_estimator=remax"],
    "gspo": ["algorithm.adv_estimator=grpo", "actor_rollout_ref.actor.policy_loss.loss_mode=gspo",
             "actor_rollout_ref.actor.clip_ratio_low=0.0003", "actor_rollout_ref.actor.clip_ratio_high=0.0004",
             "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean"],
    "kl_in_reward": ["algorithm.adv_estimator=grpo", "algorithm.use_kl_in_reward=true",
                     "algorithm.kl_ctrl.kl_coef=0.01"],
    # actor, reference and critic in one Ulysses group of 2 (both workers hold every row), packed
    # sequences, the fused LM head + log-prob. It asserts all that a plain GAE case and a plain KL-loss case
    # asserted (the critic's loss and values; the KL loss at 0 from the reference, then above it), so those
    # two are not run apart: the padded GAE path with a critic also runs in verl-workers'
    # test_ppo_trainer_cpu.py::test_ppo_gae_with_critic_on_cpu, GRPO with the KL loss in its
    # test_grpo_steps_through_main_ppo
    "ppo_ulysses_sp2_fused": [
        "algorithm.adv_estimator=gae", "critic.optim.lr=1e-3", "critic.ppo_micro_batch_size_per_gpu=8",
        "actor_rollout_ref.actor.use_kl_loss=true", "actor_rollout_ref.actor.kl_loss_coef=0.01",
        "actor_rollout_ref.model.use_remove_padding=true", "critic.model.use_remove_padding=true",
        "actor_rollout_ref.actor.ulysses_sequence_parallel_size=2", "critic.ulysses_sequence_parallel_size=2",
        "actor_rollout_ref.model.use_fused_kernels=true",
    ],
}


def run_algorithm(train_logged, name, task_data, model, out):
    cfg = load_config([
        f"data.train_files={task_data['train']}", f"data.val_files={task_data['test']}",
        "data.val_max_samples=16", f"actor_rollout_ref.model.path={model}", f"critic.model.path={model}",
        "actor_rollout_ref.model.enable_gradient_checkpointing=false",
        "critic.model.enable_gradient_checkpointing=false",
        "data.max_prompt_length=32", "data.max_response_length=4", "data.train_batch_size=4",
        "actor_rollout_ref.rollout.n=4", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=8",
        "actor_rollout_ref.actor.optim.lr=1e-3", f"reward.custom_reward_function.path={SHAPED_REWARD}",
        "actor_rollout_ref.rollout.temperature=1.5",
        "trainer.device=cpu", "trainer.nnodes=1", "trainer.n_gpus_per_node=2",
        f"trainer.total_training_steps={STEPS}", "trainer.test_freq=3", "trainer.val_before_train=true",
        "trainer.logger=[jsonl]", "trainer.progress_bar=false", f"trainer.default_local_dir={out}",
        "trainer.project_name=e2e", f"trainer.experiment_name={name}", "trainer.resume_mode=disable",
        *ALGORITHMS[name],
    ])
    return train_logged(cfg)


@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_algorithm_runs_end_to_end(name, train_logged, task_data, tiny_chat_model, tmp_path):
    rows = run_algorithm(train_logged, name, task_data, tiny_chat_model, tmp_path)
    train = [r for r in rows if "critic/score/mean" in r]
    assert [r["step"] for r in train] == list(range(1, STEPS + 1))
    val = [r for r in rows if "val/arithmetic/reward" in r]
    assert [r["step"] for r in val] == [0, STEPS]
    for r in train:
        for key in ("actor/pg_loss", "actor/grad_norm", "critic/advantages/mean", "response_length/mean"):
            assert math.isfinite(r[key]), (key, r[key])
        assert 0.0 <= r["critic/score/mean"] <= 1.0
    # Rewards vary within groups, so advantages are not all zero and the policy gets a gradient.
    assert all(r["actor/grad_norm"] > 0 for r in train)
    assert any(r["critic/advantages/max"] > r["critic/advantages/min"] for r in train)
    if name.startswith("ppo_"):
        assert all(math.isfinite(r["critic/vf_loss"]) and "critic/values/mean" in r for r in train)
    else:
        assert "critic/vf_loss" not in train[0]
    if name == "kl_in_reward":
        # Step 1 samples from the initial policy, which is the reference: the penalty is exactly 0 then.
        assert train[0]["actor/reward_kl_penalty"] == pytest.approx(0.0, abs=1e-6)
        assert abs(train[-1]["actor/reward_kl_penalty"]) > 1e-7
    if name == "ppo_ulysses_sp2_fused":
        assert train[0]["actor/kl_loss"] == pytest.approx(0.0, abs=1e-6)
        assert train[-1]["actor/kl_loss"] > 1e-7
    else:
        assert "actor/kl_loss" not in train[0]
