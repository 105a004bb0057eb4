"""Megatron's DDP and optimizer from ``optim.*`` (the same keys as the FSDP engines), and the LR schedule.

The optimizer is ``get_megatron_optimizer`` (Adam with decoupled weight decay, ``betas``, ``lr``,
``weight_decay``; Megatron applies no weight decay to biases and norm weights) over the chunks wrapped
in Megatron's ``DistributedDataParallel``; ``megatron.use_distributed_optimizer`` shards its state
(and the fp32 main weights of bf16 models) over the data-parallel ranks. Gradients are reduced over
the data-parallel group once per schedule run (``finalize_model_grads``), then
:func:`optimizer_step` clips to ``grad_clip`` and steps, or skips when the norm is not finite.
The LR follows :func:`verl.workers.engine.optim.lr_factor` (warmup, constant / cosine).
"""

from __future__ import annotations

import math
from typing import Any

from verl.workers.engine.optim import SCHEDULER_TYPES, lr_factor


def build_optimizer(chunks: list, tf_config: Any, optim_config: Any, engine_config: Any, grad_clip: float | None):
    """``(DDP-wrapped chunks, Megatron optimizer)``; sets the schedule hooks on ``tf_config``."""
    from megatron.core.distributed import (
        DistributedDataParallel,
        DistributedDataParallelConfig,
        finalize_model_grads,
    )
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer

    betas = [float(b) for b in optim_config.betas]
    if len(betas) != 2:
        raise ValueError(f"optim.betas must have two values, got {betas}")
    distributed = bool(engine_config.use_distributed_optimizer)
    ddp_config = DistributedDataParallelConfig(
        grad_reduce_in_fp32=True,
        overlap_grad_reduce=False,
        overlap_param_gather=False,
        use_distributed_optimizer=distributed,
        **dict(engine_config.override_ddp_config or {}),
    )
    ddp_chunks = [
        DistributedDataParallel(config=tf_config, ddp_config=ddp_config, module=chunk, disable_bucketing=i > 0)
        for i, chunk in enumerate(chunks)
    ]
    opt_config = OptimizerConfig(
        optimizer="adam",
        lr=float(optim_config.lr),
        weight_decay=float(optim_config.weight_decay),
        adam_beta1=betas[0],
        adam_beta2=betas[1],
        clip_grad=float(grad_clip) if grad_clip is not None and grad_clip > 0 else 0.0,
        use_distributed_optimizer=distributed,
        params_dtype=tf_config.params_dtype,
        bf16=tf_config.bf16,
        fp16=tf_config.fp16,
    )
    optimizer = get_megatron_optimizer(opt_config, ddp_chunks)
    # what Megatron-LM's training loop sets: reduce grads (DP, tied embeddings, SP norms) once per run
    tf_config.finalize_model_grads_func = finalize_model_grads
    no_sync = [c.no_sync for c in ddp_chunks]
    tf_config.no_sync_func = no_sync[0] if len(no_sync) == 1 else no_sync
    return ddp_chunks, optimizer


def optimizer_step(optimizer: Any, ddp_chunks: list, grad_clip: float | None) -> float:
    """Clip and step (skipped when the gradient norm is not finite), then zero the gradient buffers.
    Returns the norm before clipping."""
    found_inf = optimizer.prepare_grads()
    grad_norm = math.nan if found_inf else float(optimizer.get_grad_norm())
    if math.isfinite(grad_norm):
        optimizer.step()  # clips to OptimizerConfig.clip_grad
    for chunk in ddp_chunks:
        chunk.zero_grad_buffer()
    optimizer.zero_grad()
    return grad_norm


class LRSchedule:
    """Sets ``lr * lr_factor(step)`` on every parameter group of a Megatron optimizer."""

    def __init__(self, optimizer: Any, optim_config: Any, total_training_steps: int | None):
        if optim_config.lr_scheduler_type not in SCHEDULER_TYPES:
            raise ValueError(
                f"unknown optim.lr_scheduler_type {optim_config.lr_scheduler_type!r}; known: {', '.join(SCHEDULER_TYPES)}"
            )
        if optim_config.lr_scheduler_type == "cosine" and total_training_steps is None:
            raise ValueError("optim.lr_scheduler_type='cosine' needs total_training_steps; none was given")
        self.optimizer = optimizer
        self.optim_config = optim_config
        self.total_training_steps = total_training_steps
        self.last_step = 0
        self._apply()

    def _apply(self) -> None:
        lr = float(self.optim_config.lr) * lr_factor(self.last_step, self.optim_config, self.total_training_steps)
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    def step(self) -> None:
        self.last_step += 1
        self._apply()

    def state_dict(self) -> dict[str, int]:
        return {"last_step": self.last_step}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.last_step = int(state["last_step"])
        self._apply()

