"""Megatron's process groups: sizes from the ``megatron`` config section, one initialisation per process.

Megatron-Core keeps its parallel state (``megatron.core.parallel_state``) in module globals, so every
Megatron engine in a process (actor, reference, critic colocated in one worker process) shares one
layout. The first engine initialises it; a later one with other sizes is refused (it would silently
train on the first one's groups).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch.distributed as dist


@dataclass(frozen=True)
class ParallelSizes:
    """Tensor / pipeline (/ virtual) / context / expert parallel sizes and the derived data-parallel size."""

    tp: int
    pp: int
    vpp: int | None
    cp: int
    ep: int
    dp: int
    sequence_parallel: bool  # effective: only with tp > 1

    @property
    def layout(self) -> tuple:
        return (self.tp, self.pp, self.vpp, self.cp, self.ep)


def parallel_sizes(engine_config: Any, world_size: int) -> ParallelSizes:
    """Read the sizes (upstream key names) and derive ``dp = world / (tp * pp * cp)``."""
    tp = int(engine_config.tensor_model_parallel_size)
    pp = int(engine_config.pipeline_model_parallel_size)
    vpp = engine_config.virtual_pipeline_model_parallel_size
    vpp = None if vpp is None or int(vpp) <= 1 else int(vpp)
    cp = int(engine_config.context_parallel_size)
    ep = int(engine_config.expert_model_parallel_size)
    for key, value in (("tensor_model_parallel_size", tp), ("pipeline_model_parallel_size", pp),
                       ("context_parallel_size", cp), ("expert_model_parallel_size", ep)):
        if value < 1:
            raise ValueError(f"megatron.{key}={value} must be >= 1")
    if world_size % (tp * pp * cp):
        raise ValueError(
            f"megatron.tensor_model_parallel_size={tp} x pipeline_model_parallel_size={pp} x "
            f"context_parallel_size={cp} = {tp * pp * cp} does not divide the {world_size} workers"
        )
    if vpp is not None and pp < 2:
        raise ValueError(
            f"megatron.virtual_pipeline_model_parallel_size={vpp} interleaves pipeline stages; it needs "
            f"pipeline_model_parallel_size >= 2 (got {pp})"
        )
    return ParallelSizes(tp=tp, pp=pp, vpp=vpp, cp=cp, ep=ep, dp=world_size // (tp * pp * cp),
                         sequence_parallel=bool(engine_config.sequence_parallel) and tp > 1)


_initialized_layout: tuple | None = None


def init_parallel_state(sizes: ParallelSizes) -> None:
    """``parallel_state.initialize_model_parallel`` once per process (see module doc)."""
    global _initialized_layout
    from megatron.core import parallel_state as mpu

    if not dist.is_initialized():
        raise RuntimeError(
            "torch.distributed is not initialised: call dist.init_process_group('gloo' on CPU, 'nccl' on "
            "GPU) in every worker before building a training engine"
        )
    if mpu.model_parallel_is_initialized():
        if _initialized_layout is not None and _initialized_layout != sizes.layout:
            raise ValueError(
                "Megatron's parallel layout is per process and this process already uses "
                f"(tp, pp, vpp, cp, ep)={_initialized_layout}; another engine here asks for {sizes.layout}. "
                "Colocated Megatron roles (actor, ref, critic) must use the same parallel sizes"
            )
        return
    mpu.initialize_model_parallel(
        tensor_model_parallel_size=sizes.tp,
        pipeline_model_parallel_size=sizes.pp,
        virtual_pipeline_model_parallel_size=sizes.vpp,
        context_parallel_size=sizes.cp,
        expert_model_parallel_size=sizes.ep,
    )
    _initialized_layout = sizes.layout


@dataclass(frozen=True)
class RankInfo:
    """This process's coordinates in the Megatron layout (what the dispatch modes need)."""

    tp_rank: int
    dp_rank: int
    pp_rank: int
    cp_rank: int
    tp_size: int
    dp_size: int
    pp_size: int
    cp_size: int


def rank_info() -> RankInfo:
    from megatron.core import parallel_state as mpu

    return RankInfo(
        tp_rank=mpu.get_tensor_model_parallel_rank(),
        dp_rank=mpu.get_data_parallel_rank(),
        pp_rank=mpu.get_pipeline_model_parallel_rank(),
        cp_rank=mpu.get_context_parallel_rank(),
        tp_size=mpu.get_tensor_model_parallel_world_size(),
        dp_size=mpu.get_data_parallel_world_size(),
        pp_size=mpu.get_pipeline_model_parallel_world_size(),
        cp_size=mpu.get_context_parallel_world_size(),
    )
