"""AdamW and the LR schedule from ``optim.*`` (upstream key names).

Warmup is ``lr_warmup_steps`` when >= 0, else ``int(lr_warmup_steps_ratio * total_training_steps)``.
``constant``: linear warmup from 0 to ``lr``, then ``lr``. ``cosine``: linear warmup, then a cosine from
``lr`` down to ``min_lr_ratio * lr`` over the remaining steps (``num_cycles=0.5`` is half a period).
"""

from __future__ import annotations

import math
from typing import Any

import torch

SCHEDULER_TYPES = ("constant", "cosine")


def build_optimizer(params, optim_config: Any) -> torch.optim.AdamW:
    """AdamW with ``lr``, ``betas``, ``weight_decay`` from ``optim_config``."""
    betas = tuple(float(b) for b in optim_config.betas)
    if len(betas) != 2:
        raise ValueError(f"optim.betas must have two values, got {list(optim_config.betas)}")
    params = list(params)
    kind = "fused" if _fused_ok(params) else "foreach"
    return torch.optim.AdamW(
        params,
        lr=float(optim_config.lr),
        betas=betas,
        weight_decay=float(optim_config.weight_decay),
        **{kind: True},
    )


def _fused_ok(params: list) -> bool:
    """Plain CPU parameters take torch's fused AdamW: one pass over each parameter doing the whole
    update, instead of foreach's chain of ops each reading and writing every state tensor (on CPU the
    foreach ops loop over the tensors anyway; benchmarks/grpo_step measures it). Same update to float
    rounding (test_optim.py).

    Otherwise foreach: one multi-tensor kernel per Adam op instead of one per parameter, which torch
    picks by default on GPU only; for FSDP2's DTensor parameters (each per-parameter op pays DTensor's
    Python dispatch) the per-parameter loop costs more than the step's arithmetic."""
    from torch.distributed.tensor import DTensor

    plain = [p for p in params if isinstance(p, torch.Tensor) and not isinstance(p, DTensor)]
    return len(plain) == len(params) > 0 and all(
        p.device.type == "cpu" and p.dtype in (torch.float32, torch.float64, torch.bfloat16, torch.float16)
        for p in plain
    )


def warmup_steps(optim_config: Any, total_training_steps: int | None) -> int:
    """Number of warmup steps (see module doc)."""
    if int(optim_config.lr_warmup_steps) >= 0:
        return int(optim_config.lr_warmup_steps)
    ratio = float(optim_config.lr_warmup_steps_ratio)
    if ratio == 0.0:
        return 0
    if total_training_steps is None:
        raise ValueError(
            f"optim.lr_warmup_steps_ratio={ratio} needs total_training_steps, which the trainer passes to "
            f"the worker; none was given"
        )
    return int(ratio * total_training_steps)


def lr_factor(step: int, optim_config: Any, total_training_steps: int | None) -> float:
    """Multiplier of ``optim.lr`` at scheduler step ``step`` (0-based)."""
    kind = optim_config.lr_scheduler_type
    n_warm = warmup_steps(optim_config, total_training_steps)
    if step < n_warm:
        return float(step) / float(max(1, n_warm))
    if kind == "constant":
        return 1.0
    if kind == "cosine":
        if total_training_steps is None:
            raise ValueError("optim.lr_scheduler_type='cosine' needs total_training_steps; none was given")
        min_ratio = float(optim_config.min_lr_ratio)
        progress = (step - n_warm) / float(max(1, total_training_steps - n_warm))
        progress = min(progress, 1.0)
        cos = 0.5 * (1.0 + math.cos(math.pi * 2.0 * float(optim_config.num_cycles) * progress))
        return min_ratio + (1.0 - min_ratio) * cos
    raise ValueError(f"unknown optim.lr_scheduler_type {kind!r}; known: {', '.join(SCHEDULER_TYPES)}")


def build_lr_scheduler(
    optimizer: torch.optim.Optimizer, optim_config: Any, total_training_steps: int | None
) -> torch.optim.lr_scheduler.LambdaLR:
    """A ``LambdaLR`` following :func:`lr_factor` (checked once up front for bad settings)."""
    if optim_config.lr_scheduler_type not in SCHEDULER_TYPES:
        raise ValueError(
            f"unknown optim.lr_scheduler_type {optim_config.lr_scheduler_type!r}; known: {', '.join(SCHEDULER_TYPES)}"
        )
    lr_factor(0, optim_config, total_training_steps)
    if optim_config.lr_scheduler_type == "cosine" and total_training_steps is None:
        raise ValueError("optim.lr_scheduler_type='cosine' needs total_training_steps; none was given")
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: lr_factor(step, optim_config, total_training_steps)
    )
