"""Weights from the trainer pool to the rollout pool, in ``verl.workers.rollout.weight_sync``'s buckets.

Two transports (``async_training.weight_sync``):

- ``collective``: a torch.distributed gloo group that spans both pools, made for this purpose next to
  each pool's own default group: trainer rank 0 is its rank 0, rollout rank i its rank 1 + i
  (rendezvous through a TCPStore that trainer rank 0 hosts). Each bucket travels as three broadcasts
  from rank 0 (sizes, pickled chunk metadata, the flat byte buffer); sizes of -1 end the sync. Gloo
  moves CPU tensors, so on GPUs the buckets are staged through host memory (an NCCL group would move
  them device to device; not written here). Both pools block until the transfer is done.
- ``object_store``: trainer rank 0 puts each bucket into Ray's object store and returns the references;
  the rollout ranks fetch them when they next reach a safe point. The trainer does not wait for them.

Either way the rollout side reassembles tensors with ``WeightBucketReceiver`` and copies them into its
module (``load_full_weights``: plain or FSDP2-sharded).
"""

from __future__ import annotations

import datetime
import pickle
from collections.abc import Iterable, Iterator

import torch
import torch.distributed as dist
from torch import nn
from verl.workers.rollout.weight_sync import WeightBucket, WeightBucketReceiver, iter_weight_buckets

TRANSPORTS = ("collective", "object_store")
# the same rollout.engine_kwargs key the hybrid engine's weight sync reads (fsdp_workers)
BUCKET_MB_KEY = "update_weights_bucket_megabytes"
_END = -1


class CrossPoolGroup:
    """A gloo process group over trainer rank 0 (group rank 0) and the rollout ranks (1..size-1)."""

    def __init__(
        self,
        host: str,
        port: int,
        rank: int,
        size: int,
        store: dist.TCPStore | None = None,
        timeout_s: float = 1800.0,
    ):
        timeout = datetime.timedelta(seconds=timeout_s)
        if store is None:
            store = dist.TCPStore(host, port, size, is_master=False, timeout=timeout)
        self.store = store
        self.rank, self.size = rank, size
        self.pg = dist.ProcessGroupGloo(store, rank, size, timeout)

    @staticmethod
    def host_store(host: str, size: int, timeout_s: float = 1800.0) -> dist.TCPStore:
        """The rendezvous store on trainer rank 0 (port chosen by the OS; read ``store.port``)."""
        return dist.TCPStore(
            host,
            0,
            size,
            is_master=True,
            timeout=datetime.timedelta(seconds=timeout_s),
            wait_for_workers=False,
        )

    def broadcast(self, tensor: torch.Tensor) -> torch.Tensor:
        self.pg.broadcast(tensor, 0).wait()
        return tensor

    def send_buckets(self, buckets: Iterable[WeightBucket]) -> int:
        """Group rank 0: broadcast every bucket, then the end mark. Returns the bytes sent."""
        sent = 0
        for bucket in buckets:
            header = torch.frombuffer(bytearray(pickle.dumps(bucket.metas)), dtype=torch.uint8)
            self.broadcast(torch.tensor([bucket.buffer.numel(), header.numel()], dtype=torch.int64))
            self.broadcast(header)
            self.broadcast(bucket.buffer.contiguous())
            sent += bucket.buffer.numel()
        self.broadcast(torch.tensor([_END, 0], dtype=torch.int64))
        return sent

    def recv_buckets(self) -> Iterator[WeightBucket]:
        """Other ranks: the buckets rank 0 broadcasts, until its end mark."""
        while True:
            sizes = self.broadcast(torch.empty(2, dtype=torch.int64)).tolist()
            if sizes[0] == _END:
                return
            header = self.broadcast(torch.empty(sizes[1], dtype=torch.uint8))
            buffer = self.broadcast(torch.empty(sizes[0], dtype=torch.uint8))
            yield WeightBucket(buffer=buffer, metas=pickle.loads(header.numpy().tobytes()))


def buckets_of(state_dict: dict[str, torch.Tensor], bucket_mb: int) -> Iterator[WeightBucket]:
    return iter_weight_buckets(state_dict.items(), int(bucket_mb) << 20)


def load_full_weights(module: nn.Module, named: Iterable[tuple[str, torch.Tensor]]) -> int:
    """Copy full tensors into ``module``'s parameters and buffers of the same names; returns how many.

    FSDP2-sharded parameters take this rank's shard of the full tensor. An unknown name is an error
    (the two pools must hold the same architecture)."""
    from torch.distributed.tensor import DTensor, distribute_tensor

    targets = dict(module.named_parameters(remove_duplicate=False))
    targets.update(dict(module.named_buffers(remove_duplicate=False)))
    loaded = 0
    with torch.no_grad():
        for name, full in named:
            if name not in targets:
                raise KeyError(f"weight {name!r} from the trainer has no counterpart in the rollout's module")
            target = targets[name]
            if isinstance(target, DTensor):
                # every rollout rank holds the full tensor: take the local shard without communicating
                shard = distribute_tensor(
                    full.to(target.device_mesh.device_type),
                    target.device_mesh,
                    target.placements,
                    src_data_rank=None,
                )
                target.to_local().copy_(shard.to_local())
            else:
                target.copy_(full.to(device=target.device, dtype=target.dtype))
            loaded += 1
    return loaded


def receive_into(module: nn.Module, buckets: Iterable[WeightBucket]) -> int:
    """Reassemble the buckets' tensors and load them into ``module``; returns the tensors loaded."""
    receiver = WeightBucketReceiver()
    loaded = 0
    for bucket in buckets:
        loaded += load_full_weights(module, receiver.receive(bucket))
    receiver.finish()
    return loaded


__all__ = ["BUCKET_MB_KEY", "TRANSPORTS", "CrossPoolGroup", "buckets_of", "load_full_weights", "receive_into"]
