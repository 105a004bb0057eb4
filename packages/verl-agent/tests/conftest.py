"""Shared fixtures: the char tokenizer (Qwen-style template), rollout configs, a scripted model."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tokenizer(tmp_path_factory):
    from verl.workers.tiny import load_char_tokenizer

    return load_char_tokenizer(tmp_path_factory.mktemp("char_tok"))


@pytest.fixture(scope="session")
def stop_ids(tokenizer):
    """End of turn first (what the scripted model appends), then EOS."""
    return [tokenizer.convert_tokens_to_ids("<|im_end|>"), tokenizer.eos_token_id]


@pytest.fixture
def rollout_config():
    """``rollout_config(**overrides)`` -> actor_rollout_ref.rollout with ``key=value`` overrides
    (``multi_turn.max_assistant_turns=3`` style keys relative to rollout)."""
    from verl.trainer.config.loader import load_config

    def make(**overrides):
        argv = ["actor_rollout_ref.rollout.multi_turn.tokenization_sanity_check_mode=strict"]
        argv += [f"actor_rollout_ref.rollout.{k.replace('__', '.')}={v}" for k, v in overrides.items()]
        return load_config(argv).actor_rollout_ref.rollout

    return make
