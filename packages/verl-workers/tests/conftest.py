"""Shared fixtures for verl-workers tests: tiny Qwen2 models saved to session temp dirs.

Tests load them through the real ``from_pretrained(path)`` code paths.
"""

import pytest


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> str:
    """A random-init xs Qwen2ForCausalLM + char tokenizer, saved with save_pretrained (seed 0)."""
    from verl.workers.tiny import build_tiny_qwen2

    path = tmp_path_factory.mktemp("tiny_qwen2_xs")
    build_tiny_qwen2(path, size="xs", seed=0)
    return str(path)


@pytest.fixture(scope="session")
def tiny_value_model_dir(tmp_path_factory) -> str:
    """A random-init xs Qwen2ForTokenClassification (num_labels=1) + char tokenizer (seed 1)."""
    from verl.workers.tiny import build_tiny_qwen2

    path = tmp_path_factory.mktemp("tiny_qwen2_xs_value")
    build_tiny_qwen2(path, size="xs", seed=1, value_head=True)
    return str(path)


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_model_dir):
    """The char tokenizer of ``tiny_model_dir``, loaded with AutoTokenizer."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)
