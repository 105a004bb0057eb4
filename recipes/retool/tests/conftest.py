"""Shared fixtures: the tiny character tokenizer (loaded through from_pretrained) and a rollout config."""

import pytest


@pytest.fixture(scope="session")
def tok(tmp_path_factory):
    from verl.workers.tiny import load_char_tokenizer

    return load_char_tokenizer(tmp_path_factory.mktemp("char_tok"))


@pytest.fixture(scope="session")
def stop_ids(tok):
    return [tok.convert_tokens_to_ids("<|im_end|>"), tok.eos_token_id]


@pytest.fixture
def rollout_config():
    """``rollout_config(**overrides)``: actor_rollout_ref.rollout with ``multi_turn__key=value`` overrides."""
    from verl.trainer.config import load_config

    def make(**overrides):
        argv = [
            "data.max_response_length=400",
            "actor_rollout_ref.rollout.multi_turn.tokenization_sanity_check_mode=strict",
        ]
        argv += [f"actor_rollout_ref.rollout.{k.replace('__', '.')}={v}" for k, v in overrides.items()]
        return load_config(argv).actor_rollout_ref.rollout

    return make
