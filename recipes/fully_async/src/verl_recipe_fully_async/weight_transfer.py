"""Weights from the trainer pool to the rollout pool, in ``verl.workers.rollout.weight_sync``'s buckets.

Two transports (``async_training.weight_sync``):

- ``collective``: verl-workers' ``WeightSyncGroup``, a torch.distributed group that spans both pools,
  made for this purpose next to each pool's own default group: trainer rank 0 is its rank 0, rollout
  rank i its rank 1 + i (rendezvous through a TCPStore that trainer rank 0 hosts); NCCL on GPUs (device
  to device), gloo on CPU. On a vLLM rollout pool the member is the engine's own worker process (vLLM's
  worker extension), which loads the buckets into the engine as they arrive. The trainer waits until the
  rollout side has received them: at the rollouter's next safe point, or, with
  ``async_training.overlap_weight_sync``, at once (the rollout side receives in the background while it
  keeps generating and loads at its next safe point).
- ``object_store``: trainer rank 0 puts each bucket into Ray's object store and returns the references;
  the rollout ranks fetch them when they next reach a safe point. The trainer does not wait for them.

Either way the rollout side reassembles tensors with ``WeightBucketReceiver`` and copies them into its
module (``load_full_weights``: plain or FSDP2-sharded) or its engine.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import torch
from torch import nn
from verl.workers.rollout.weight_sync import WeightBucket, WeightBucketReceiver, iter_weight_buckets

TRANSPORTS = ("collective", "object_store")
# the same rollout.engine_kwargs key the hybrid engine's weight sync reads (fsdp_workers)
BUCKET_MB_KEY = "update_weights_bucket_megabytes"


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


__all__ = ["BUCKET_MB_KEY", "TRANSPORTS", "buckets_of", "load_full_weights", "receive_into"]
