"""The device a process computes on, as a value the code carries (upstream's helper names).

``trainer.device`` (``auto`` | ``cpu`` | ``cuda``) is resolved once by the driver
(``verl.trainer.config.resolve_device``) and handed to every worker; a worker turns that name into its
``torch.device`` with :func:`set_worker_device` and joins torch.distributed with
:func:`get_nccl_backend`. Code that builds a tensor for a collective asks :func:`collective_device`
which device the group's backend needs (the GPU for NCCL, the CPU for gloo), so the CPU tests run the
same lines as a GPU job; only the line that selects a CUDA device cannot run here.

Under Ray, each GPU worker sees only the GPU Ray gave it (``CUDA_VISIBLE_DEVICES``), so the torchrun
habit ``torch.cuda.set_device(LOCAL_RANK)`` picks a device that does not exist for every rank but the
first; :func:`local_device_index` finds the right index.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

import torch

DEVICE_NAMES = ("cpu", "cuda")
_BACKENDS = {"cpu": "gloo", "cuda": "nccl"}


def get_device_name() -> str:
    """The accelerator this process can use: ``cuda`` when a CUDA device is visible, else ``cpu``."""
    return "cuda" if torch.cuda.is_available() else "cpu"


def resolve_device_name(name: str | None) -> str:
    """``auto`` (or None) -> :func:`get_device_name`; ``cpu`` / ``cuda`` are checked and returned."""
    if name in (None, "auto"):
        return get_device_name()
    if name not in DEVICE_NAMES:
        raise ValueError(f"unknown device {name!r}; known: auto, {', '.join(DEVICE_NAMES)}")
    return str(name)


def get_torch_device(device_name: str | None = None):
    """The torch module of a device type (``torch.cuda`` or ``torch.cpu``)."""
    return getattr(torch, resolve_device_name(device_name))


def get_nccl_backend(device_name: str | None = None) -> str:
    """The torch.distributed backend for a device type: ``nccl`` on CUDA, ``gloo`` on CPU."""
    return _BACKENDS[resolve_device_name(device_name)]


def get_device_id() -> int:
    """Index of the current CUDA device (0 on CPU)."""
    return torch.cuda.current_device() if torch.cuda.is_available() else 0


def local_device_index(
    local_rank: int, device_count: int, visible_devices: str | None = None, assigned: Sequence[str] | None = None
) -> int:
    """The CUDA index this worker must use.

    ``assigned``: the GPU ids Ray gave this worker (physical ids, as ``ray.get_gpu_ids()`` returns them);
    ``visible_devices``: ``CUDA_VISIBLE_DEVICES``. Under Ray the assigned id is looked up among the
    visible ones (Ray usually makes it the only one: index 0). Without Ray, ``LOCAL_RANK`` (torchrun).
    """
    if device_count < 1:
        raise RuntimeError("no CUDA device is visible to this worker; use trainer.device=cpu")
    if assigned:
        gpu = str(assigned[0])
        if visible_devices:
            ids = [v.strip() for v in visible_devices.split(",") if v.strip()]
            if gpu not in ids:
                raise RuntimeError(
                    f"Ray assigned GPU {gpu} to this worker but CUDA_VISIBLE_DEVICES={visible_devices!r} does not "
                    f"list it"
                )
            return ids.index(gpu)
        if not gpu.isdigit() or int(gpu) >= device_count:
            raise RuntimeError(f"Ray assigned GPU {gpu!r} but only {device_count} CUDA devices are visible")
        return int(gpu)
    if device_count == 1:
        return 0
    if not 0 <= local_rank < device_count:
        raise RuntimeError(f"LOCAL_RANK={local_rank} but this node shows {device_count} CUDA devices")
    return local_rank


def _ray_gpu_ids() -> list[str]:
    ray = sys.modules.get("ray")  # only a Ray worker has Ray loaded and initialised
    if ray is None or not ray.is_initialized():
        return []
    return [str(g) for g in ray.get_gpu_ids()]


def set_worker_device(device_name: str | None) -> torch.device:
    """Make this worker's device current and return it (a CUDA index chosen by :func:`local_device_index`)."""
    name = resolve_device_name(device_name)
    if name == "cpu":
        return torch.device("cpu")
    index = local_device_index(
        int(os.environ.get("LOCAL_RANK", 0)), torch.cuda.device_count(), os.environ.get("CUDA_VISIBLE_DEVICES"),
        _ray_gpu_ids(),
    )
    torch.cuda.set_device(index)
    return torch.device("cuda", index)


def collective_device(group=None) -> torch.device:
    """The device a tensor must live on to be reduced or gathered over ``group`` (default: the world):
    the current CUDA device when the group's backend is NCCL, else the CPU (gloo)."""
    import torch.distributed as dist

    if "nccl" in str(dist.get_backend(group)):
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def seed_everything(seed: int) -> None:
    """Seed Python's ``random``, NumPy and torch (CPU and every CUDA device) with ``seed``."""
    import random

    import numpy as np

    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)  # seeds the CUDA generators too when CUDA is up


__all__ = [
    "DEVICE_NAMES",
    "collective_device",
    "get_device_id",
    "get_device_name",
    "get_nccl_backend",
    "get_torch_device",
    "local_device_index",
        "resolve_device_name",
    "seed_everything",
    "set_worker_device",
]
