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


@pytest.fixture(scope="session")
def dist_world1(tmp_path_factory):
    """A one-process gloo group in the test process (engines need torch.distributed initialised)."""
    import torch.distributed as dist

    if not dist.is_initialized():
        store = tmp_path_factory.mktemp("dist_store") / "store"
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    assert dist.get_world_size() == 1, "another test left a multi-process group in this process"
    return dist


@pytest.fixture(scope="session")
def ppo_config():
    """A function ``(*overrides) -> resolved trainer DictConfig`` (upstream key names)."""
    from verl.trainer.config import load_config

    def make(*overrides: str):
        return load_config(list(overrides))  # schema defaults only

    return make


@pytest.fixture(scope="session")
def make_rl_batch():
    """A function building a DataProto shaped like a rollout output (docs/contracts.md): left-padded
    prompts, right-padded responses, masks, position ids and PPO tensors, all from ``seed``."""
    from verl.workers.engine.testing import make_rl_batch as make

    return make
