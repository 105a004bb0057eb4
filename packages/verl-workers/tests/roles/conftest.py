"""Helpers for the role tests: a small trainer config over the tiny model and a prompt batch."""

import pytest
from verl.trainer.config import load_config
from verl.workers.engine.testing import chat_prompt_batch as make_prompts


def make_config(model_path, *overrides):
    """A full trainer config (unvalidated) sized for CPU tests; ``overrides`` are ``key=value``."""
    return load_config(
        [
            f"actor_rollout_ref.model.path={model_path}",
            "actor_rollout_ref.model.enable_gradient_checkpointing=false",
            "critic.model.enable_gradient_checkpointing=false",
            "data.train_batch_size=2",
            "data.max_prompt_length=16",
            "data.max_response_length=6",
            "actor_rollout_ref.rollout.n=2",
            "actor_rollout_ref.actor.ppo_mini_batch_size=2",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
            "actor_rollout_ref.actor.optim.lr=0.01",
            "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2",
            "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=2",
            "critic.ppo_micro_batch_size_per_gpu=2",
            "critic.optim.lr=0.01",
            *overrides,
        ]
    )


@pytest.fixture
def make_cfg():
    return make_config


@pytest.fixture
def prompts_for():
    return make_prompts
