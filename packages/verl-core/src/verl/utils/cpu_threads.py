"""How many CPUs a process may use, and how many torch threads each role of a run gets.

The rule, decided once when a process starts and never from the machine's momentary load:

- a Ray worker runs as many torch (OpenMP) threads as the CPUs its resource request reserved
  (``threads_for_cpus(num_cpus)``; at least one, as a fractional request still runs);
- the driver, which moves batches between workers and does little arithmetic itself, runs one
  (``DRIVER_THREADS``) while its workers compute in their own processes; a driver that hosts its
  worker in-process (``trainer.worker_backend=local``) gives it the process's CPUs instead;
- "the CPUs" are the ones this process may run on: its affinity mask (taskset, a container's
  cpuset), capped by a cgroup CPU quota (Docker/Kubernetes ``--cpus``). ``os.cpu_count()`` counts the
  host's CPUs, which inside a container can be many times the share the process actually gets.

Why it matters: each torch op above a small size is an OpenMP parallel region that ends in a barrier
waiting for all its threads. Threads beyond the CPUs a process really gets (two processes each
running a pool the size of the machine, or a worker using more threads than it reserved) make every
region wait for a descheduled thread, and a step of thousands of small regions slows many-fold.

Priority (``worker_niceness_env``): Ray starts its worker processes at nice 15; ours run at nice 0,
like the driver and any other job. Under contention a nice-15 worker gets ~1/30 of a core's share, so
beside another training run the step slows many-fold while the worker's own CPU time stays the same.

How OpenMP threads wait is left to libgomp (spin at a barrier, then sleep): passive waiting degrades
less under contention but slows the step on a quiet machine, where a spinning thread catches the next
parallel region without a wake-up. A user on a node shared with other jobs can set
``OMP_WAIT_POLICY=PASSIVE`` in the driver's environment (the workers inherit it) or in
``ray_kwargs.ray_init.runtime_env.env_vars``. The measurements behind both choices:
``benchmarks/grpo_step/README.md`` ("The cause: Ray runs its workers at nice 15").
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Mapping
from pathlib import Path

__all__ = [
    "DRIVER_THREADS",
    "WORKER_NICENESS",
    "apply_worker_threads",
    "available_cpus",
    "cgroup_cpu_limit",
    "set_torch_threads",
    "threads_for_cpus",
    "worker_niceness_env",
]

DRIVER_THREADS = 1

#: the niceness of Ray worker processes (see ``worker_niceness_env``)
WORKER_NICENESS = 0


def worker_niceness_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """``{"RAY_worker_niceness": "0"}`` for Ray's workers, or nothing when ``environ`` (default: this
    process's, which the raylet it starts inherits) already sets ``RAY_worker_niceness``.

    Ray starts every worker process at nice 15 (its ``worker_niceness`` setting) so that its own daemons
    stay responsive. In a training run the workers are the computation: at nice 15 a worker gets a
    CPU-time weight of 36 against 1024 for any ordinary process, so one other job on the node (another
    training run, a compile, a data loader) takes ~97% of the cores it shares with the worker. At nice 0
    the worker shares the cores fairly, as a plain ``python train.py`` does."""
    environ = os.environ if environ is None else environ
    if "RAY_worker_niceness" in environ:
        return {}
    return {"RAY_worker_niceness": str(WORKER_NICENESS)}


def cgroup_cpu_limit(root: str | Path = "/sys/fs/cgroup") -> float | None:
    """The CPU quota of this process's cgroup in CPUs (quota / period), None when unlimited or
    unknown. Reads cgroup v2 (``cpu.max``: "max 100000" or "200000 100000") or v1
    (``cpu/cpu.cfs_quota_us`` and ``cpu.cfs_period_us``; quota -1 = unlimited)."""
    root = Path(root)
    try:
        quota, period = (root / "cpu.max").read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:
        quota_us = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period_us = int((root / "cpu" / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return quota_us / period_us if quota_us > 0 and period_us > 0 else None


def available_cpus(cgroup_root: str | Path = "/sys/fs/cgroup") -> int:
    """The CPUs this process may use: its affinity mask, capped by the cgroup quota (rounded up: a
    quota of 1.5 CPUs keeps two threads busy part of the time), at least 1."""
    if hasattr(os, "sched_getaffinity"):
        cpus = len(os.sched_getaffinity(0))
    else:  # macOS, Windows: no affinity call
        cpus = os.cpu_count() or 1
    limit = cgroup_cpu_limit(cgroup_root)
    if limit is not None:
        cpus = min(cpus, math.ceil(limit))
    return max(1, cpus)


def threads_for_cpus(num_cpus: float) -> int:
    """torch threads for a process that reserved ``num_cpus`` CPUs: the whole CPUs of the request
    (a fractional share runs one thread), never more than the process may use."""
    if num_cpus <= 0:
        raise ValueError(f"num_cpus must be > 0, got {num_cpus}")
    return max(1, min(int(num_cpus), available_cpus()))


def set_torch_threads(n: int) -> None:
    """``torch.set_num_threads(n)`` (intra-op; OpenMP/MKL pools follow it)."""
    import torch

    if torch.get_num_threads() != n:
        torch.set_num_threads(n)


def apply_worker_threads(reserved_cpus: float) -> int:
    """Give this worker process ``threads_for_cpus(reserved_cpus)`` torch threads, unless the user
    chose the workers' ``OMP_NUM_THREADS`` (Ray's own default for an actor is ``max(1,
    floor(num_cpus))``; any other value came from the user and wins). Before torch is imported this
    sets ``OMP_NUM_THREADS``, which torch reads at import; after, ``torch.set_num_threads``.
    Returns the thread count."""
    ray_default = str(max(1, math.floor(reserved_cpus)))
    given = os.environ.get("OMP_NUM_THREADS")
    if given is not None and given != ray_default:
        n = int(given)
    else:
        n = threads_for_cpus(reserved_cpus)
    if "torch" in sys.modules:
        set_torch_threads(n)
    else:
        os.environ["OMP_NUM_THREADS"] = str(n)
    return n
