"""The reward loop's keys: upstream's spellings, and the combinations validation refuses, each named."""

import pytest
from verl.trainer.config import ConfigError, load_config, validate_config

REQUIRED = ["data.train_files=train.parquet", "actor_rollout_ref.model.path=/models/tiny"]


def _problems(*overrides):
    with pytest.raises(ConfigError) as ei:
        validate_config(load_config([*REQUIRED, *overrides]))
    return str(ei.value)


def test_off_by_default_and_upstream_spellings_translate():
    cfg = load_config(REQUIRED)
    assert cfg.reward.use_reward_loop is False and cfg.reward.num_workers == 8
    cfg = load_config([*REQUIRED, "reward_model.use_reward_loop=true", "reward_model.num_workers=3"])
    assert cfg.reward.use_reward_loop is True and cfg.reward.num_workers == 3
    validate_config(cfg)  # naive manager, 1024 prompts, 4 chunks: fine


def test_refused_combinations_say_why():
    loop = "reward.use_reward_loop=true"
    assert "two schedules for one reward" in _problems(loop, "reward.launch_reward_fn_async=true")
    assert "reward_manager=batch calls its scorer once with the whole batch" in _problems(
        loop, "reward.reward_manager=batch"
    )
    assert "reward model's forward pass on its worker group is not run in it" in _problems(
        loop, "reward.reward_model.enable=true", "reward.reward_model.model.path=/models/rm"
    )
    msg = _problems(loop, "data.train_batch_size=2", "actor_rollout_ref.actor.ppo_mini_batch_size=2",
                    "reward.reward_loop_chunks=3")  # fmt: skip
    assert "reward.reward_loop_chunks=3 is more than the 2 prompts generated per round (data.train_batch_size)" in msg
    assert "reward.num_workers=0 must be >= 1" in _problems(loop, "reward.num_workers=0")
    assert "reward.reward_loop_chunks=0 must be >= 1" in _problems("reward.reward_loop_chunks=0")


def test_refused_with_gkd_targets_replacing_generated_responses():
    distill = ["distillation.enabled=true", "distillation.nnodes=1", "distillation.n_gpus_per_node=2",
               "distillation.teacher_models.teacher_model.model_path=/models/teacher",
               "distillation.teacher_models.teacher_model.inference.name=hf",
               "distillation.teacher_models.teacher_model.inference.tensor_model_parallel_size=1"]  # fmt: skip
    msg = _problems("reward.use_reward_loop=true", *distill, "distillation.distillation_loss.lmbda=0.5")
    assert "lmbda=0.5 < 1 replaces some rows' responses with their targets after generation" in msg
