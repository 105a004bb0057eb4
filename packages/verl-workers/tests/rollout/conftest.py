"""Fixtures for the rollout tests: a tiny random-init Qwen2 saved to disk and loaded back."""

import pytest
import torch
from transformers import AutoModelForCausalLM, Qwen2Config, Qwen2ForCausalLM
from verl.workers.tiny import tiny_config

VOCAB = 48
PAD, EOS = 0, 1


@pytest.fixture(scope="session")
def rollout_model_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("rollout_tiny_qwen2")
    cfg = Qwen2Config(**tiny_config(VOCAB, max_position_embeddings=128, tie_word_embeddings=True, pad_token_id=PAD,
                                    eos_token_id=EOS, bos_token_id=EOS))  # fmt: skip
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(cfg)
    # Random init gives near-uniform logits; sharpen them so greedy decoding has clear winners
    # and EOS shows up within a few steps for some rows.
    with torch.no_grad():
        model.model.embed_tokens.weight.mul_(8.0)
    model.save_pretrained(path)
    return path


@pytest.fixture
def rollout_model(rollout_model_dir):
    model = AutoModelForCausalLM.from_pretrained(rollout_model_dir, dtype=torch.float32)
    model.eval()
    return model
