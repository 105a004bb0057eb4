"""Helpers for the role tests: a small trainer config over the tiny model and a prompt batch."""

import pytest
import torch
from verl import DataProto
from verl.trainer.config import load_config


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


def make_prompts(tokenizer, texts, n=1, meta=None):
    """Left-padded chat prompts as the RL dataset gives them, repeated n times (interleaved)."""
    enc = [
        tokenizer.apply_chat_template(
            [{"role": "user", "content": t}], add_generation_prompt=True, tokenize=True, return_dict=False
        )
        for t in texts
    ]
    p = max(len(e) for e in enc)
    ids = torch.full((len(enc), p), tokenizer.pad_token_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, e in enumerate(enc):
        ids[i, p - len(e) :] = torch.tensor(e)
        mask[i, p - len(e) :] = 1
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    data = DataProto.from_dict(
        tensors={"input_ids": ids, "attention_mask": mask, "position_ids": pos}, meta_info=dict(meta or {})
    )
    return data.repeat(n, interleave=True) if n > 1 else data


@pytest.fixture
def make_cfg():
    return make_config


@pytest.fixture
def prompts_for():
    return make_prompts
