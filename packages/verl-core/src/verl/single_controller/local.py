"""A worker group of one worker living in the driver's own process (``trainer.worker_backend=local``).

The same worker classes, ``@register`` dispatch and collect functions as the Ray backend, with the
method call made in-process: no Ray cluster, no second Python process, no serialisation. For runs
with a single worker (a CPU laptop, a debugger session, a notebook): one process holds the driver and
the model, so memory is one torch import instead of two, and ``pdb`` stops inside worker code.
Several roles (actor, critic, reward model) share the process as they share a Ray worker when
colocated. More than one worker needs real processes: use the Ray backend.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
from collections.abc import Iterator
from typing import Any

from verl.single_controller.base.worker_group import ClassWithInitArgs, WorkerGroup


class LocalWorkerGroup(WorkerGroup):
    """``cls_with_init`` built here, now, as rank 0 of a world of one; its registered methods bound
    onto the group exactly as ``RayWorkerGroup`` binds them."""

    def __init__(self, cls_with_init: ClassWithInitArgs):
        super().__init__(resource_pool=None)
        self._is_init_with_detached_workers = False
        worker = cls_with_init()
        if worker.world_size != 1:
            raise ValueError(
                f"LocalWorkerGroup runs one worker in this process, but {type(worker).__name__} sees "
                f"WORLD_SIZE={worker.world_size} in the environment; unset it or use the Ray backend"
            )
        self._workers = [worker]
        self._worker_names = [f"local:{type(worker).__name__}"]
        self._bind_worker_method(cls_with_init.cls)

    @property
    def worker(self) -> Any:
        """The worker object itself (in this process)."""
        return self._workers[0]

    def _execute(self, method_name: str, args: tuple, kwargs: dict, rank_zero: bool, blocking: bool) -> list:
        # The dispatch functions give per-worker lists (length world_size = 1) or one value for all, as
        # for the Ray backend; results are values either way (``blocking=False`` has nothing to wait on).
        def mine(value: Any) -> Any:
            return value[0] if isinstance(value, (list, tuple)) and len(value) == 1 else value

        method = getattr(self.worker, method_name)
        result = method(*(mine(a) for a in args), **{k: mine(v) for k, v in kwargs.items()})
        if inspect.iscoroutine(result):  # an async worker method: a Ray actor would await it for us
            result = asyncio.run(result)
        return [result]


_RENDEZVOUS_KEYS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


@contextlib.contextmanager
def restored_process_env() -> Iterator[None]:
    """Undo, on exit, what running a worker in this process leaves behind: the rank-0 rendezvous
    variables it sets and its gloo process group. For running several local-backend trainers one after
    another in one process (tests, notebooks)."""
    import torch.distributed as dist

    saved = {key: os.environ.get(key) for key in _RENDEZVOUS_KEYS}
    try:
        yield
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
