"""Model folders the check builds locally (no hub): random weights from a config, the project's character
tokenizer padded to the model's vocabulary, saved with ``save_pretrained`` and loaded back through the
real ``from_pretrained`` paths.

The speed shapes are Qwen2.5-0.5B's and Qwen2.5-1.5B's published configurations (hidden size, layers,
heads, KV heads, MLP width, vocabulary, tied embeddings); the weights are random, so only speed and
memory mean anything there.
"""

from __future__ import annotations

import random
import string
from pathlib import Path
from typing import Any

_QWEN25_COMMON = dict(vocab_size=151936, tie_word_embeddings=True, rope_theta=1000000.0, rms_norm_eps=1e-6,
                      max_position_embeddings=32768)

SHAPES: dict[str, dict[str, Any]] = {
    "qwen2.5-0.5b": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                         num_key_value_heads=2, **_QWEN25_COMMON),
    "qwen2.5-1.5b": dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
                         num_key_value_heads=2, **_QWEN25_COMMON),
    # the correctness checks' model: small enough to build in seconds, big enough for real kernels
    "check": dict(hidden_size=512, intermediate_size=1408, num_hidden_layers=4, num_attention_heads=8,
                  num_key_value_heads=2, vocab_size=1024, tie_word_embeddings=True, rope_theta=10000.0,
                  rms_norm_eps=1e-6, max_position_embeddings=2048),
    # --quick (the CPU dry run): the same code paths at toy sizes
    "quick-a": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, vocab_size=512, tie_word_embeddings=True, rope_theta=10000.0,
                    rms_norm_eps=1e-6, max_position_embeddings=512),
    "quick-b": dict(hidden_size=96, intermediate_size=192, num_hidden_layers=3, num_attention_heads=4,
                    num_key_value_heads=2, vocab_size=640, tie_word_embeddings=True, rope_theta=10000.0,
                    rms_norm_eps=1e-6, max_position_embeddings=512),
}

# Renders [{"role": "user", "content": text}] as text alone: the prompt is exactly its characters.
PLAIN_CHAT_TEMPLATE = "{% for message in messages %}{{ message['content'] }}{% endfor %}"
PROMPT_CHARS = string.ascii_lowercase + string.digits


def param_count(shape: dict[str, Any]) -> int:
    """Parameters of a Qwen2 causal LM of ``shape`` (q/k/v biases, tied embeddings counted once)."""
    h, i, n = shape["hidden_size"], shape["intermediate_size"], shape["num_hidden_layers"]
    kv = shape["num_key_value_heads"] * (h // shape["num_attention_heads"])
    per_layer = (h * h + h) + 2 * (h * kv + kv) + h * h + 3 * h * i + 2 * h
    embed = shape["vocab_size"] * h
    head = 0 if shape["tie_word_embeddings"] else embed
    return embed + n * per_layer + h + head


def flops_shape(shape: dict[str, Any]) -> dict[str, int]:
    """The keys ``benchmarks/grpo_step/flops.py`` counts with."""
    keys = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "intermediate_size")
    return {k: int(shape[k]) for k in keys}


def build_model(out: Path, name: str, seed: int = 0, device: str = "cpu", save_dtype: str = "bfloat16") -> Path:
    """``out`` with config, weights (random, seed ``seed``) and the padded character tokenizer; kept if present."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM
    from verl.workers.tiny import build_char_tokenizer

    shape = SHAPES[name]
    if (out / "config.json").exists():
        return out
    out.mkdir(parents=True, exist_ok=True)
    tok = build_char_tokenizer(vocab_size=shape["vocab_size"])
    tok.chat_template = PLAIN_CHAT_TEMPLATE
    tok.save_pretrained(str(out))
    cfg = Qwen2Config(pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, bos_token_id=None,
                      attention_dropout=0.0, **shape)
    torch.manual_seed(seed)
    with torch.device(device):
        model = Qwen2ForCausalLM(cfg)
    model.generation_config.pad_token_id = tok.pad_token_id
    model.generation_config.eos_token_id = tok.eos_token_id
    model.to(getattr(torch, save_dtype)).save_pretrained(str(out))
    del model
    if device == "cuda":
        torch.cuda.empty_cache()  # the implementations run in other processes: leave them the memory
    return out


def prompt_texts(n: int, length: int, seed: int = 0) -> list[str]:
    """``n`` distinct random strings of ``length`` characters: ``length`` tokens each (one a character)."""
    rng = random.Random(seed)
    texts: set[str] = set()
    while len(texts) < n:
        texts.add("".join(rng.choice(PROMPT_CHARS) for _ in range(length)))
    return sorted(texts)


def write_prompt_rows(path: Path, texts: list[str]) -> str:
    """The texts in the RL row contract (the ``arithmetic`` scorer gives them 0: only the work matters)."""
    from verl.utils.dataset import write_parquet

    rows = [{"data_source": "arithmetic", "prompt": [{"role": "user", "content": t}], "ability": "math",
             "reward_model": {"style": "rule", "ground_truth": "0"}, "extra_info": {"index": i}}
            for i, t in enumerate(texts)]
    return str(write_parquet(rows, path))
