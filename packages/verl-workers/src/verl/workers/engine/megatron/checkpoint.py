"""Megatron engine checkpoints with Megatron-Core's distributed checkpointing (``dist_checkpointing``).

Layout of one checkpoint folder (the same bookkeeping as :mod:`verl.workers.checkpoint.dcp`, so the
trainer's resume logic reads it alike)::

    dist_ckpt/                   model (+ optimizer) as sharded tensors in global (unsharded) coordinates
    extra_state_rank_<r>.pt      LR schedule step and RNG states of rank r
    huggingface/                 config.json, tokenizer files (+ full HF weights with ``hf_model``)
    checkpoint_meta.json         written last, by rank 0, after every rank finished

Parameters are saved by their global shape (Megatron's ``sharded_state_dict``), so the weights reload
under any other tensor / pipeline / data-parallel split. The optimizer state follows the optimizer:
with ``use_distributed_optimizer=false`` it is per parameter too and reshards like the weights; the
distributed optimizer's state is saved in Megatron's ``dp_reshardable`` format, which reloads under
another data-parallel size but the same tensor/pipeline split (Megatron-Core 0.16's
``fully_reshardable`` format cannot be loaded back into torch's AdamW, the optimizer used without
apex / Transformer Engine; a load that would need it is refused). RNG states are restored only with
the same world size.
"""

from __future__ import annotations

import json
import os
import shutil
import warnings
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist
from verl.workers.checkpoint.dcp import (
    HF_DIR,
    META_FILE,
    _contents,
    _rng_state,
    _save_hf_config,
    _set_rng_state,
    read_meta,
)

if TYPE_CHECKING:
    from verl.workers.engine.megatron.engine import MegatronEngine

DIST_DIR = "dist_ckpt"
# the distributed optimizer's checkpoint format (see the module doc; the default one, with flattened
# ranges, is refused by Megatron-Core 0.16's own ShardedTensor checks)
_OPTIM_METADATA = {"distrib_optim_sharding_type": "dp_reshardable"}


def _distributed_optimizer(engine: MegatronEngine) -> bool:
    return engine.optimizer is not None and bool(engine.engine_config.use_distributed_optimizer)


def _check_optimizer_layout(engine: MegatronEngine, meta: dict, path: str) -> None:
    saved = meta.get("parallel", {})
    now = {"tp": engine.sizes.tp, "pp": engine.sizes.pp}
    if meta.get("distributed_optimizer") != _distributed_optimizer(engine):
        raise ValueError(
            f"checkpoint at {path!r} holds the state of a {'distributed' if meta.get('distributed_optimizer') else 'plain'} "
            f"optimizer; this engine has megatron.use_distributed_optimizer={_distributed_optimizer(engine)}: "
            "use the same setting, or leave 'optimizer' out of checkpoint.load_contents"
        )
    if _distributed_optimizer(engine) and {k: saved.get(k) for k in now} != now:
        raise ValueError(
            f"checkpoint at {path!r} was saved with tensor/pipeline parallel {saved.get('tp')}/{saved.get('pp')}, "
            f"this engine uses {now['tp']}/{now['pp']}: the distributed optimizer's state reloads only under the "
            "same split (weights reshard freely); leave 'optimizer' out of checkpoint.load_contents or save with "
            "megatron.use_distributed_optimizer=false"
        )


def _inner_optimizers(optimizer) -> list:
    from megatron.core.optimizer import ChainedOptimizer

    chained = optimizer.chained_optimizers if isinstance(optimizer, ChainedOptimizer) else [optimizer]
    return [o.optimizer for o in chained]


def _unshare_adam_steps(optimizer) -> None:
    """Give every parameter its own Adam ``step`` tensor after a load.

    Megatron-Core 0.16's distributed optimizer restores torch AdamW's per-parameter ``step`` as one
    tensor object shared by all parameters; AdamW increments it in place once per parameter, so every
    later step would bias-correct each parameter with a different count.
    """
    for opt in _inner_optimizers(optimizer):
        for state in opt.state.values():
            if isinstance(state.get("step"), torch.Tensor):
                state["step"] = state["step"].clone()


def _materialize_optimizer_state(optimizer) -> None:
    """Give every parameter an Adam state (one zero-gradient step) so there is state to load into.

    Megatron-Core builds the loading layout from the optimizer's current state and, without apex or
    Transformer Engine (torch's AdamW), asserts that it has a ``step``; a fresh engine has none. The
    values are placeholders: the checkpoint overwrites the state and the parameters right after.
    """
    for opt in _inner_optimizers(optimizer):
        if all(len(opt.state.get(p, {})) for g in opt.param_groups for p in g["params"]):
            continue
        for group in opt.param_groups:
            for p in group["params"]:
                p.grad = torch.zeros_like(p)
        opt.step()
        opt.zero_grad(set_to_none=True)


def _sharded_state_dict(engine: MegatronEngine, with_optimizer: bool, is_loading: bool) -> dict:
    if len(engine.chunks) == 1:
        state = {"model": engine.chunks[0].sharded_state_dict()}
    else:
        state = {f"model{i}": chunk.sharded_state_dict() for i, chunk in enumerate(engine.chunks)}
    if with_optimizer:
        state["optimizer"] = engine.optimizer.sharded_state_dict(state, is_loading=is_loading, metadata=_OPTIM_METADATA)
    return state


def save_megatron_checkpoint(engine: MegatronEngine, path: str, global_step: int = 0) -> None:
    """Write model, optimizer, LR schedule and RNG state to ``path`` (collective)."""
    from megatron.core import dist_checkpointing

    rank, world = dist.get_rank(), dist.get_world_size()
    contents = _contents(engine, "save_contents")
    target = os.path.join(path, DIST_DIR)
    if rank == 0:
        os.makedirs(path, exist_ok=True)
        if os.path.exists(os.path.join(path, META_FILE)):
            os.remove(os.path.join(path, META_FILE))  # an old marker would make a rewrite look complete
        if os.path.isdir(target):
            shutil.rmtree(target)
        os.makedirs(target)
    dist.barrier()
    dist_checkpointing.save(_sharded_state_dict(engine, "optimizer" in contents, is_loading=False), target)
    if "extra" in contents:
        extra = {
            "lr_scheduler": engine.lr_scheduler.state_dict() if engine.lr_scheduler is not None else None,
            "rng": _rng_state(),
            "world_size": world,
        }
        torch.save(extra, os.path.join(path, f"extra_state_rank_{rank}.pt"))
    full = engine.full_state_dict() if "hf_model" in contents else None  # collective
    if rank == 0:
        _save_hf_config(engine, os.path.join(path, HF_DIR), full)
    dist.barrier()
    if rank == 0:
        meta = {"global_step": int(global_step), "world_size": world, "model_type": engine.model_type,
                "strategy": "megatron", "contents": sorted(contents),
                "parallel": {"tp": engine.sizes.tp, "pp": engine.sizes.pp, "dp": engine.sizes.dp},
                "distributed_optimizer": _distributed_optimizer(engine)}
        tmp = os.path.join(path, META_FILE + ".tmp")
        with open(tmp, "w") as f:
            json.dump(meta, f)
        os.replace(tmp, os.path.join(path, META_FILE))
    dist.barrier()


def load_megatron_checkpoint(engine: MegatronEngine, path: str) -> None:
    """Load what :func:`save_megatron_checkpoint` wrote into ``engine`` (collective)."""
    from megatron.core import dist_checkpointing

    meta = read_meta(path)
    if meta.get("strategy") != "megatron":
        raise ValueError(
            f"checkpoint at {path!r} was written by {meta.get('strategy')!r}, not strategy=megatron; "
            f"load it with that engine (or export it to Hugging Face and start from model.path)"
        )
    if meta["model_type"] != engine.model_type:
        raise ValueError(
            f"checkpoint at {path!r} holds a {meta['model_type']!r} model; this engine is {engine.model_type!r}"
        )
    wanted = _contents(engine, "load_contents") - {"hf_model"}
    saved = set(meta["contents"])
    if wanted - saved:
        raise ValueError(
            f"checkpoint.load_contents asks for {sorted(wanted - saved)} but the checkpoint at {path!r} holds "
            f"only {sorted(saved)}; drop them from load_contents"
        )
    with_optimizer = "optimizer" in wanted
    if with_optimizer:
        _check_optimizer_layout(engine, meta, path)
        _materialize_optimizer_state(engine.optimizer)
    state = dist_checkpointing.load(
        _sharded_state_dict(engine, with_optimizer, is_loading=True), os.path.join(path, DIST_DIR)
    )
    if len(engine.chunks) == 1:
        engine.chunks[0].load_state_dict(state["model"])
    else:
        for i, chunk in enumerate(engine.chunks):
            chunk.load_state_dict(state[f"model{i}"])
    if with_optimizer:
        with torch.no_grad():  # fp32 main parameters are views of the (grad-requiring) model parameters
            engine.optimizer.load_state_dict(state["optimizer"])
        _unshare_adam_steps(engine.optimizer)
    if "extra" not in wanted:
        return
    rank, world = dist.get_rank(), dist.get_world_size()
    same_world = meta["world_size"] == world
    extra = torch.load(os.path.join(path, f"extra_state_rank_{rank if same_world else 0}.pt"), weights_only=False)
    if engine.lr_scheduler is not None and extra["lr_scheduler"] is not None:
        engine.lr_scheduler.load_state_dict(extra["lr_scheduler"])
    if same_world:
        _set_rng_state(extra["rng"])
    elif rank == 0:
        warnings.warn(
            f"checkpoint at {path!r} was saved by {meta['world_size']} workers, loading on {world}: model, "
            f"optimizer and LR schedule are restored, per-worker RNG states are not",
            stacklevel=2,
        )
