"""On-policy distillation enters the step as named stages of the trainer's pipeline: ``teacher`` right
after ``ref`` (the teachers score the rows the update will train on) and, with GKD's ``lmbda`` < 1,
``gkd_mix`` right after ``gen`` (before any stage reads the responses)."""

import pytest
import torch
from verl.protocol import DataProto
from verl.trainer.config import load_config

TAIL = ["adv", "update_critic", "update_actor", "dump_rollout", "testing", "save_checkpoint"]
ON = ["distillation.enabled=true", "distillation.nnodes=1", "distillation.n_gpus_per_node=1"]


def _trainer(*overrides):
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    t = RayPPOTrainer.__new__(RayPPOTrainer)  # only what build_pipeline reads
    t.config = load_config(list(overrides))
    return t


def _names(*overrides):
    return _trainer(*overrides).pipeline.names


def test_no_distillation_stage_when_it_is_off():
    names = _names()
    assert "teacher" not in names and "gkd_mix" not in names


def test_the_teacher_stage_follows_ref():
    assert _names(*ON) == ["gen", "reward", "filter", "balance", "old_log_prob", "ref", "teacher", "values", *TAIL]


def test_gkd_mix_follows_gen_only_when_lmbda_is_below_one():
    assert "gkd_mix" not in _names(*ON, "distillation.distillation_loss.lmbda=1.0")
    names = _names(*ON, "distillation.distillation_loss.lmbda=0.5", "algorithm.adv_estimator=remax")
    assert names[:4] == ["gen", "gkd_mix", "greedy_baseline", "reward"]


def test_with_overlapping_scoring_the_teacher_runs_while_the_reward_is_computed():
    names = _names(*ON, "reward.launch_reward_fn_async=true", "distillation.distillation_loss.lmbda=0.5")
    # the mix rebuilds responses, so it precedes balance and the scored snapshot
    assert names == ["gen", "gkd_mix", "balance", "reward", "old_log_prob", "ref", "teacher", "values", "filter", *TAIL]


def test_a_trainer_that_started_no_teacher_says_so_at_the_teacher_stage():
    trainer = _trainer(*ON)  # e.g. a subclass whose own init_workers does not start the teachers
    batch = DataProto.from_dict(tensors={"responses": torch.zeros(2, 3, dtype=torch.long)})
    with pytest.raises(RuntimeError, match="started no teacher worker group"):
        trainer.pipeline["teacher"].run(batch, {})
