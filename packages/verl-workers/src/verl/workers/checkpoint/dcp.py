"""Sharded engine checkpoints with ``torch.distributed.checkpoint`` (DCP).

Layout of one checkpoint folder (e.g. ``global_step_10/actor``)::

    model_optim/                 DCP: {"model": ..., "optimizer": ...}, sharded, written by every rank
    extra_state_rank_<r>.pt      LR scheduler state and RNG states of rank r
    huggingface/                 config.json (+ generation config, tokenizer files) for export
    checkpoint_meta.json         written last, by rank 0, after every rank finished

What is written follows ``checkpoint.save_contents`` (``model``, ``optimizer``, ``extra`` = LR scheduler
and RNG, ``hf_model`` = also a full Hugging Face copy of the weights in ``huggingface/``); loading
follows ``checkpoint.load_contents`` and fails if it asks for something the checkpoint lacks.

``checkpoint_meta.json`` marks a complete checkpoint: a folder without it was being written when the
run stopped, and loading it is an error. Model and optimizer reload with a different worker count
(DCP reshards); the RNG states are restored only with the same count.
"""

from __future__ import annotations

import errno
import json
import os
import random
import shutil
import warnings
from typing import TYPE_CHECKING

import numpy as np
import torch
import torch.distributed as dist
from verl.workers.checkpoint.hf_model import build_model_from_config, state_dtype

if TYPE_CHECKING:
    from verl.workers.engine.fsdp import _FSDPEngineBase

META_FILE = "checkpoint_meta.json"
DCP_DIR = "model_optim"
HF_DIR = "huggingface"
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja",
                    "vocab.json", "merges.txt", "tokenizer.model", "generation_config.json")


def is_complete_checkpoint(path: str | os.PathLike) -> bool:
    """True when ``path`` holds a fully written engine checkpoint."""
    return os.path.isfile(os.path.join(path, META_FILE))


def read_meta(path: str | os.PathLike) -> dict:
    """The metadata of a complete checkpoint; raises if the checkpoint is missing or half-written."""
    meta = os.path.join(path, META_FILE)
    if not os.path.isdir(path):
        raise FileNotFoundError(f"no checkpoint folder at {os.fspath(path)!r}")
    if not os.path.isfile(meta):
        raise RuntimeError(
            f"checkpoint at {os.fspath(path)!r} is incomplete (no {META_FILE}): it was still being written "
            f"when the run stopped; resume from an earlier checkpoint"
        )
    with open(meta) as f:
        return json.load(f)


def _rng_state() -> dict:
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def _set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])


CONTENTS = ("model", "optimizer", "extra", "hf_model")
_DEFAULT_CONTENTS = ("model", "optimizer", "extra")


def _contents(engine: _FSDPEngineBase, key: str) -> set[str]:
    cfg = engine.checkpoint_config
    chosen = set(cfg[key]) if cfg is not None else set(_DEFAULT_CONTENTS)
    unknown = chosen - set(CONTENTS)
    if unknown:
        raise ValueError(f"checkpoint.{key} has unknown entries {sorted(unknown)}; known: {', '.join(CONTENTS)}")
    if "model" not in chosen:
        raise ValueError(f"checkpoint.{key}={sorted(chosen)} must include 'model'")
    if engine.optimizer is None:
        chosen.discard("optimizer")
    return chosen


def _state_dicts(engine: _FSDPEngineBase, with_optimizer: bool = True) -> dict:
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_state_dict

    if engine.optimizer is None or not with_optimizer:
        return {"model": get_model_state_dict(engine.module)}
    model_sd, optim_sd = get_state_dict(engine.module, engine.optimizer)
    return {"model": model_sd, "optimizer": optim_sd}


def save_engine_checkpoint(engine: _FSDPEngineBase, path: str, global_step: int = 0) -> None:
    """Write ``engine``'s model, optimizer, LR scheduler and RNG state to ``path`` (collective).

    A failure names the folder; a full disk says so (DCP reports it as e.g. ``unexpected pos 704 vs 598``).
    """
    from torch.distributed.checkpoint.api import CheckpointException

    try:
        _save_engine_checkpoint(engine, path, global_step)
    except (Exception, CheckpointException) as e:  # DCP's CheckpointException is a BaseException
        raise _save_error(path, e) from e


def _save_error(path: str, error: BaseException) -> Exception:
    """The error of a failed save in the user's terms: disk full (ENOSPC), or what failed where."""
    where = path if os.path.exists(path) else os.path.dirname(path)
    usage = shutil.disk_usage(where) if os.path.exists(where) else None
    cause = str(error).strip().splitlines()[-1] if str(error).strip() else type(error).__name__
    full = isinstance(error, OSError) and error.errno == errno.ENOSPC
    # what was written so far is still there: a full disk has (almost) nothing left
    full = full or (usage is not None and usage.free < max(1 << 20, usage.total // 1000))
    if full:
        free = f"{usage.free} of {usage.total} bytes free" if usage is not None else "disk full"
        return OSError(
            errno.ENOSPC,
            f"No space left on device while writing checkpoint {path} ({free}; {type(error).__name__}: {cause}). "
            f"This checkpoint is not committed and the previous one stays the latest; free space or set "
            f"trainer.default_local_dir to a disk with room, then resume",
        )
    return RuntimeError(f"writing checkpoint {path} failed: {type(error).__name__}: {cause}")


def _save_engine_checkpoint(engine: _FSDPEngineBase, path: str, global_step: int) -> None:
    import torch.distributed.checkpoint as dcp

    rank, world = dist.get_rank(), dist.get_world_size()
    contents = _contents(engine, "save_contents")
    if rank == 0:
        os.makedirs(path, exist_ok=True)
        # an old marker would make a half-rewritten folder look complete
        if os.path.exists(os.path.join(path, META_FILE)):
            os.remove(os.path.join(path, META_FILE))
        if os.path.isdir(os.path.join(path, DCP_DIR)):
            shutil.rmtree(os.path.join(path, DCP_DIR))
    dist.barrier()
    dcp.save(_state_dicts(engine, "optimizer" in contents), checkpoint_id=os.path.join(path, DCP_DIR))
    if "extra" in contents:
        extra = {
            "lr_scheduler": engine.lr_scheduler.state_dict() if engine.lr_scheduler is not None else None,
            "rng": _rng_state(),
            "world_size": world,
        }
        torch.save(extra, os.path.join(path, f"extra_state_rank_{rank}.pt"))
    # HF names; with LoRA the adapters merged in (the adapter itself goes to lora_adapter/)
    full = engine.hf_state_dict() if "hf_model" in contents else None  # collective
    if rank == 0:
        _save_hf_config(engine, os.path.join(path, HF_DIR), full)
    dist.barrier()
    if rank == 0:
        meta = {"global_step": int(global_step), "world_size": world, "model_type": engine.model_type,
                "strategy": type(engine).__name__, "contents": sorted(contents)}
        tmp = os.path.join(path, META_FILE + ".tmp")
        with open(tmp, "w") as f:
            json.dump(meta, f)
        os.replace(tmp, os.path.join(path, META_FILE))
    dist.barrier()


def check_shards(dcp_dir: str) -> None:
    """Every shard file the DCP metadata lists is present and at least as long as the data it indexes:
    a truncated or missing shard is refused naming the file, before DCP fails in ``torch.load``."""
    from torch.distributed.checkpoint import FileSystemReader

    try:
        meta = FileSystemReader(dcp_dir).read_metadata()
    except Exception as e:
        raise ValueError(f"cannot read the DCP metadata of checkpoint {dcp_dir}: {type(e).__name__}: {e}") from e
    need: dict[str, int] = {}
    for info in meta.storage_data.values():
        need[info.relative_path] = max(need.get(info.relative_path, 0), info.offset + info.length)
    for name, size in sorted(need.items()):
        file = os.path.join(dcp_dir, name)
        if not os.path.isfile(file):
            raise FileNotFoundError(f"checkpoint shard {file} is missing (listed in {dcp_dir}/.metadata)")
        have = os.path.getsize(file)
        if have < size:
            raise ValueError(
                f"checkpoint shard {file} is truncated: {have} bytes, the checkpoint's metadata indexes {size}; "
                f"the file was cut short after the save (copy, transfer or disk); restore it or resume from an "
                f"earlier checkpoint"
            )


def apply_schedule(scheduler: torch.optim.lr_scheduler.LRScheduler) -> None:
    """Set the optimizer's rates to what this run's schedule gives at the restored step.

    The optimizer state restores the rate the saving run's schedule gave; a run resumed with a larger
    ``total_training_steps`` (allowed) has another cosine, and its first step would train at the old rate
    (0 at the end of the old schedule). The lambdas are this run's (a state dict does not carry them).
    """
    if not isinstance(scheduler, torch.optim.lr_scheduler.LambdaLR):
        return
    step = scheduler.last_epoch
    rates = [base * fn(step) for base, fn in zip(scheduler.base_lrs, scheduler.lr_lambdas)]
    for group, lr in zip(scheduler.optimizer.param_groups, rates):
        group["lr"] = lr
    scheduler._last_lr = rates  # what get_last_lr() reports


def _save_hf_config(engine: _FSDPEngineBase, hf_dir: str, full_state: dict | None) -> None:
    os.makedirs(hf_dir, exist_ok=True)
    engine.hf_config.save_pretrained(hf_dir)
    if full_state is not None:
        # the trained weights as they are: fp32 masters under mixed precision, not the config's dtype
        model = build_model_from_config(hf_dir, engine.model_type, state_dtype(full_state))
        model.load_state_dict(full_state, strict=False)
        model.save_pretrained(hf_dir)
    src = engine.model_config.path
    for name in _TOKENIZER_FILES:
        if os.path.isfile(os.path.join(src, name)):
            shutil.copy2(os.path.join(src, name), os.path.join(hf_dir, name))


def load_engine_checkpoint(engine: _FSDPEngineBase, path: str) -> None:
    """Load what :func:`save_engine_checkpoint` wrote into ``engine`` (collective)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import set_model_state_dict, set_state_dict

    meta = read_meta(path)
    if meta["model_type"] != engine.model_type:
        raise ValueError(
            f"checkpoint at {path!r} holds a {meta['model_type']!r} model; this engine is {engine.model_type!r}"
        )
    wanted = _contents(engine, "load_contents") - {"hf_model"}
    saved = set(meta.get("contents", _DEFAULT_CONTENTS))
    if wanted - saved:
        raise ValueError(
            f"checkpoint.load_contents asks for {sorted(wanted - saved)} but the checkpoint at {path!r} holds "
            f"only {sorted(saved)}; drop them from load_contents"
        )
    state = _state_dicts(engine, "optimizer" in wanted)
    check_shards(os.path.join(path, DCP_DIR))
    from torch.distributed.checkpoint.api import CheckpointException

    try:
        dcp.load(state, checkpoint_id=os.path.join(path, DCP_DIR))
    except (Exception, CheckpointException) as e:  # DCP names neither the folder nor, in its message, the failing tensor's file
        cause = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
        raise ValueError(
            f"cannot load checkpoint {os.path.join(path, DCP_DIR)} into this {engine.model_type!r} model: {cause}"
            f" (a checkpoint of another model or shape? it must come from a run of actor_rollout_ref.model.path="
            f"{engine.model_config.path})"
        ) from e
    if "optimizer" not in state:
        set_model_state_dict(engine.module, state["model"])
    else:
        set_state_dict(engine.module, engine.optimizer, model_state_dict=state["model"],
                       optim_state_dict=state["optimizer"])
    if "extra" not in wanted:
        return
    rank, world = dist.get_rank(), dist.get_world_size()
    same_world = meta["world_size"] == world
    extra_file = os.path.join(path, f"extra_state_rank_{rank if same_world else 0}.pt")
    extra = torch.load(extra_file, weights_only=False)
    if engine.lr_scheduler is not None and extra["lr_scheduler"] is not None:
        engine.lr_scheduler.load_state_dict(extra["lr_scheduler"])
        apply_schedule(engine.lr_scheduler)
    if same_world:
        _set_rng_state(extra["rng"])
    elif rank == 0:
        warnings.warn(
            f"checkpoint at {path!r} was saved by {meta['world_size']} workers, loading on {world}: model, "
            f"optimizer and LR schedule are restored, per-worker RNG states are not",
            stacklevel=2,
        )
