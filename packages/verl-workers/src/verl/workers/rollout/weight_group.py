"""Weight buckets over a torch.distributed group that spans processes of different pools: the trainer's
rank 0 broadcasts, every rollout engine receives (disaggregated training: the trainer and the rollout
on pools of their own, as in the fully-async recipe).

The group is made for this purpose beside each pool's own default group (``ProcessGroupGloo`` /
``ProcessGroupNCCL`` over a ``TCPStore`` that the sender hosts), so the receiving side can be any
process that can reach the store: a rollout worker, or the worker process inside a vLLM engine
(:mod:`verl.workers.rollout.vllm_rollout.worker_extension` joins from there and loads the buckets
straight into the engine's model). The backend follows the device: NCCL moves CUDA buffers device to
device, gloo moves CPU buffers (:func:`backend_for`).

Each :class:`~verl.workers.rollout.weight_sync.WeightBucket` travels as three broadcasts from rank 0:
its sizes, its pickled chunk metadata, its flat byte buffer; sizes of -1 end a transfer.

:class:`BackgroundReceive` receives a whole transfer in a thread, so the receiving process keeps
generating with its old weights while the bytes arrive; the caller loads them at its next safe point.
"""

from __future__ import annotations

import datetime
import pickle
import threading
from collections.abc import Iterable, Iterator

import torch
import torch.distributed as dist
from verl.workers.rollout.weight_sync import WeightBucket

_END = -1
BACKENDS = {"cpu": "gloo", "cuda": "nccl"}


def backend_for(device_type: str) -> str:
    """The collective backend that moves buffers of ``device_type`` (``cpu`` -> gloo, ``cuda`` -> nccl)."""
    if device_type not in BACKENDS:
        raise ValueError(f"no weight-sync backend for device {device_type!r}; known: {sorted(BACKENDS)}")
    return BACKENDS[device_type]


def host_store(host: str, size: int, timeout_s: float = 1800.0) -> dist.TCPStore:
    """The rendezvous store, on the sending rank (port chosen by the OS: read ``store.port``)."""
    return dist.TCPStore(
        host, 0, size, is_master=True, timeout=datetime.timedelta(seconds=timeout_s), wait_for_workers=False
    )


class WeightSyncGroup:
    """Rank 0 sends, ranks 1..size-1 receive. ``backend``: ``gloo`` (CPU buffers) or ``nccl`` (CUDA
    buffers on the current device). Pass ``store`` on rank 0 (from :func:`host_store`)."""

    def __init__(
        self,
        host: str,
        port: int,
        rank: int,
        size: int,
        backend: str = "gloo",
        store: dist.TCPStore | None = None,
        timeout_s: float = 1800.0,
    ):
        if backend not in ("gloo", "nccl"):
            raise ValueError(f"weight-sync backend {backend!r}: use gloo (CPU) or nccl (CUDA)")
        timeout = datetime.timedelta(seconds=timeout_s)
        if store is None:
            store = dist.TCPStore(host, port, size, is_master=False, timeout=timeout)
        self.store = store
        self.rank, self.size, self.backend = rank, size, backend
        # NCCL moves buffers on this process's current CUDA device, gloo CPU buffers
        self.device = (
            torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else torch.device("cpu")
        )
        if backend == "gloo":
            self.pg = dist.ProcessGroupGloo(store, rank, size, timeout)
        else:
            options = dist.ProcessGroupNCCL.Options()
            options._timeout = timeout
            self.pg = dist.ProcessGroupNCCL(store, rank, size, options)

    def broadcast(self, tensor: torch.Tensor) -> torch.Tensor:
        opts = dist.BroadcastOptions()
        opts.rootRank = 0
        self.pg.broadcast([tensor], opts).wait()
        return tensor

    def send_buckets(self, buckets: Iterable[WeightBucket]) -> int:
        """Rank 0: broadcast every bucket, then the end mark. Returns the bytes sent."""
        sent = 0
        for bucket in buckets:
            header = torch.frombuffer(bytearray(pickle.dumps(bucket.metas)), dtype=torch.uint8)
            sizes = torch.tensor([bucket.buffer.numel(), header.numel()], dtype=torch.int64)
            self.broadcast(sizes.to(self.device))
            self.broadcast(header.to(self.device))
            self.broadcast(bucket.buffer.contiguous().to(self.device))
            sent += bucket.buffer.numel()
        self.broadcast(torch.tensor([_END, 0], dtype=torch.int64, device=self.device))
        return sent

    def recv_buckets(self) -> Iterator[WeightBucket]:
        """Other ranks: the buckets rank 0 broadcasts (buffers on this group's device), until its end mark."""
        while True:
            sizes = self.broadcast(torch.empty(2, dtype=torch.int64, device=self.device)).tolist()
            if sizes[0] == _END:
                return
            header = self.broadcast(torch.empty(sizes[1], dtype=torch.uint8, device=self.device))
            buffer = self.broadcast(torch.empty(sizes[0], dtype=torch.uint8, device=self.device))
            yield WeightBucket(buffer=buffer, metas=pickle.loads(header.cpu().numpy().tobytes()))


class BackgroundReceive:
    """Receive one transfer in a thread; :meth:`wait` returns its buckets (re-raising its failure).
    Holds a full copy of the weights until they are loaded: the price of receiving while generating."""

    def __init__(self, group: WeightSyncGroup):
        self.buckets: list[WeightBucket] = []
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(group,), name="weight-receive", daemon=True)
        self._thread.start()

    def _run(self, group: WeightSyncGroup) -> None:
        try:
            self.buckets = list(group.recv_buckets())
        except BaseException as e:  # handed to the thread that waits
            self.error = e

    @property
    def done(self) -> bool:
        return not self._thread.is_alive()

    def wait(self) -> list[WeightBucket]:
        self._thread.join()
        if self.error is not None:
            raise RuntimeError("receiving the weights failed") from self.error
        return self.buckets


__all__ = ["BACKENDS", "BackgroundReceive", "WeightSyncGroup", "backend_for", "host_store"]
