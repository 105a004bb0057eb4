"""Settings both implementations of the speed cells share, and their process scaffolding.

One cell: a model shape (``shapes.SHAPES``), ``PROMPTS`` x ``SAMPLES`` = 64 sequences, prompts of
exactly ``prompt_len`` tokens, responses of exactly ``length`` tokens (no EOS stop), bf16 compute on fp32
master weights (``Cell.dtype``), one AdamW step per generation (constant LR, grad clip 1.0, weight decay 0.01), no KL
term, no gradient checkpointing, no old-log-prob pass (one epoch over one mini-batch is on-policy: ours
takes the rollout's log-probs, TRL skips it by itself), ``micro_rows`` rows per forward/backward.

An implementation's process (``speed_ours.py`` / ``speed_trl.py``) runs its lengths in order, each in a
fresh trainer: two steps for the first length (the first one warms the process up; both are reported)
and one for each later length, unless the deadline leaves too little time for it.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

PROMPTS, SAMPLES = 8, 8
LR = 1e-6
WEIGHT_DECAY = 0.01
#: activation memory a micro-batch may keep for backward (bf16 values: ~12 x hidden + 4 x MLP width per
#: token and layer, as benchmarks/grpo_step/assets.py estimates it)
ACTIVATION_BUDGET_BYTES = 16 << 30


@dataclass
class Cell:
    shape: str
    model_dir: str
    data_file: str
    prompt_len: int
    lengths: list[int]
    device: str
    #: compute dtype over fp32 masters: bfloat16 on CUDA; float32 in the CPU dry run (bf16 matmuls on a
    #: CPU are slow and say nothing there)
    dtype: str = "bfloat16"
    micro_rows: dict[int, int] = field(default_factory=dict)

    @property
    def rows(self) -> int:
        return PROMPTS * SAMPLES


def micro_rows(shape: dict[str, Any], prompt_len: int, length: int) -> int:
    """Rows per micro-batch: the largest power of two <= 8 within ``ACTIVATION_BUDGET_BYTES`` (at least 1)."""
    per_token = 2 * (12 * shape["hidden_size"] + 4 * shape["intermediate_size"]) * shape["num_hidden_layers"]
    rows = 8
    while rows > 1 and rows * (prompt_len + length) * per_token > ACTIVATION_BUDGET_BYTES:
        rows //= 2
    return rows


def parse(description: str) -> tuple[Cell, Path, float]:
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--cell", required=True, help="the Cell as JSON")
    ap.add_argument("--json", required=True)
    ap.add_argument("--deadline", type=float, required=True, help="time.time() this process must end by")
    args = ap.parse_args()
    raw = json.loads(args.cell)
    raw["micro_rows"] = {int(k): v for k, v in raw.get("micro_rows", {}).items()}
    return Cell(**raw), Path(args.json), args.deadline


class Results:
    """The process's JSON: per length, its steps; rewritten after each length."""

    def __init__(self, path: Path, cell: Cell, impl: str, **extra: Any):
        self.path = path
        self.data: dict[str, Any] = {"impl": impl, "cell": asdict(cell), "lengths": {}, **extra}
        self.flush()

    def flush(self) -> None:
        self.path.write_text(json.dumps(self.data, indent=2, default=str))

    def add(self, length: int, entry: dict[str, Any]) -> None:
        self.data["lengths"][str(length)] = entry
        self.flush()


def steps_for(index: int) -> int:
    return 2 if index == 0 else 1


def time_left_for(length: int, previous: dict[str, Any] | None, deadline: float) -> tuple[bool, str]:
    """Whether another length fits before ``deadline``: its estimate is the previous length's setup plus
    its step scaled by the response-length ratio, times 1.3."""
    left = deadline - time.time()
    if previous is None:
        return True, ""
    step = previous["steps"][-1]["step_s"]
    estimate = 1.3 * (previous["setup_s"] + step * length / previous["length"])
    if estimate > left:
        return False, f"skipped: an estimated {estimate:.0f} s, {left:.0f} s left before the deadline"
    return True, ""


def run_lengths(cell: Cell, deadline: float, results: Results, run_one: Callable[[int, int], dict[str, Any]]) -> None:
    """``run_one(length, steps)`` for each length in order, skipping those the deadline leaves no time for."""
    previous = None
    for index, length in enumerate(cell.lengths):
        fits, why = time_left_for(length, previous, deadline)
        if not fits:
            results.add(length, {"status": why})
            continue
        previous = run_one(length, steps_for(index))
        results.add(length, previous)
