"""Weight sync from the trainer to a rollout engine that holds its own copy of the weights.

vLLM and SGLang keep their own weights; after each actor update the trainer must push the new
values. Pushing one tensor at a time costs one transfer per parameter, pushing the whole state dict
at once needs a second full copy in memory, so weights travel in **buckets**: flat ``uint8``
buffers of at most ``bucket_size_bytes``, each with metadata saying which bytes belong to which
tensor. A tensor larger than a bucket is split across consecutive buckets and reassembled by the
receiver.

The seam has three parts, all CPU-testable:

- :func:`iter_weight_buckets` (trainer side) packs ``(name, tensor)`` pairs into :class:`WeightBucket`;
- a transport moves buckets: in-process by default; the vLLM engine sends ``bucket.buffer`` as bytes
  and ``bucket.metas`` as plain lists to its worker process (``collective_rpc``), which reassembles
  them with the same receiver (CUDA IPC / NCCL broadcast would move the same two things);
- :class:`WeightBucketReceiver` (engine side) turns buckets back into ``(name, tensor)`` pairs, which
  the engine loads with :meth:`verl.workers.rollout.base.BaseRollout.update_weights`.

:func:`sync_weights` streams buckets into an engine's :meth:`BaseRollout.load_weight_buckets`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import torch
from torch import nn

# Offsets inside a bucket are aligned so a tensor that sits whole in one bucket can be viewed in
# place as its dtype (torch requires the byte offset to be a multiple of the element size).
_ALIGN = 16


def _align(n: int) -> int:
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


@dataclass(frozen=True)
class TensorChunkMeta:
    """Where a (piece of a) tensor sits in a bucket.

    ``offset``: byte offset in the bucket buffer; ``nbytes``: bytes of this piece;
    ``chunk_offset``: byte offset of this piece inside the whole tensor; ``total_nbytes``: size of
    the whole tensor. A tensor that fits in one bucket has ``chunk_offset == 0`` and
    ``nbytes == total_nbytes``.
    """

    name: str
    dtype: torch.dtype
    shape: tuple[int, ...]
    offset: int
    nbytes: int
    chunk_offset: int
    total_nbytes: int


@dataclass
class WeightBucket:
    """One transfer: a flat ``uint8`` buffer (at most the bucket size) and its chunk metadata."""

    buffer: torch.Tensor
    metas: list[TensorChunkMeta] = field(default_factory=list)


def _as_bytes(t: torch.Tensor) -> torch.Tensor:
    return t.detach().contiguous().reshape(-1).view(torch.uint8)


def iter_weight_buckets(
    named_tensors: Iterable[tuple[str, torch.Tensor]], bucket_size_bytes: int
) -> Iterator[WeightBucket]:
    """Pack tensors into buckets of at most ``bucket_size_bytes`` (tensors are copied, in order).

    Tensors of any dtype mix freely in one bucket. A tensor that does not fit in the space left
    starts a new bucket; one larger than a whole bucket is split across as many as it needs.
    """
    if bucket_size_bytes < _ALIGN:
        raise ValueError(f"bucket_size_bytes must be >= {_ALIGN}, got {bucket_size_bytes}")
    buf = torch.empty(bucket_size_bytes, dtype=torch.uint8)
    metas: list[TensorChunkMeta] = []
    used = 0

    def flush() -> WeightBucket:
        nonlocal buf, metas, used
        bucket = WeightBucket(buffer=buf[:used], metas=metas)
        buf, metas, used = torch.empty(bucket_size_bytes, dtype=torch.uint8), [], 0
        return bucket

    for name, tensor in named_tensors:
        data = _as_bytes(tensor.cpu())
        total = data.numel()
        if used and _align(used) + total > bucket_size_bytes and total <= bucket_size_bytes:
            yield flush()  # fits whole in a fresh bucket: do not split it needlessly
        done = 0
        while done < total or (total == 0 and done == 0):
            start = _align(used)
            if start >= bucket_size_bytes:
                yield flush()
                start = 0
            take = min(total - done, bucket_size_bytes - start)
            buf[start : start + take].copy_(data[done : done + take])
            metas.append(TensorChunkMeta(name, tensor.dtype, tuple(tensor.shape), start, take, done, total))
            used = start + take
            done += take
            if total == 0:
                break
    if metas:
        yield flush()


class WeightBucketReceiver:
    """Reassembles tensors from buckets; tensors split across buckets come out once complete."""

    def __init__(self) -> None:
        self._partial: dict[str, tuple[TensorChunkMeta, torch.Tensor, int]] = {}

    def receive(self, bucket: WeightBucket) -> list[tuple[str, torch.Tensor]]:
        """Unpack one bucket; returns the tensors it completes (fresh memory, not bucket views)."""
        done: list[tuple[str, torch.Tensor]] = []
        for m in bucket.metas:
            piece = bucket.buffer[m.offset : m.offset + m.nbytes]
            if m.chunk_offset == 0 and m.nbytes == m.total_nbytes:
                done.append((m.name, self._materialize(m, piece.clone())))
                continue
            if m.chunk_offset == 0:
                if m.name in self._partial:
                    raise ValueError(f"weight {m.name!r} started twice before it was complete")
                self._partial[m.name] = (m, torch.empty(m.total_nbytes, dtype=torch.uint8), 0)
            if m.name not in self._partial:
                raise ValueError(
                    f"weight {m.name!r}: got bytes from offset {m.chunk_offset} without its start"
                )
            first, data, filled = self._partial[m.name]
            if m.chunk_offset != filled:
                raise ValueError(
                    f"weight {m.name!r}: expected bytes from offset {filled}, got offset {m.chunk_offset}"
                )
            data[m.chunk_offset : m.chunk_offset + m.nbytes].copy_(piece)
            filled += m.nbytes
            if filled == m.total_nbytes:
                del self._partial[m.name]
                done.append((m.name, self._materialize(first, data)))
            else:
                self._partial[m.name] = (first, data, filled)
        return done

    @staticmethod
    def _materialize(meta: TensorChunkMeta, data: torch.Tensor) -> torch.Tensor:
        return data.view(meta.dtype).reshape(meta.shape)

    def finish(self) -> None:
        """Check that no tensor is left half-received (call after the last bucket)."""
        if self._partial:
            missing = {n: f"{f}/{m.total_nbytes} bytes" for n, (m, _, f) in self._partial.items()}
            raise ValueError(f"weight sync ended with incomplete tensors: {missing}")


def load_buckets_into(update_weights, buckets: Iterable[WeightBucket]) -> int:
    """Reassemble ``buckets`` and hand each completed group of tensors to ``update_weights``;
    returns the number of tensors loaded (for receivers that take named tensors, not raw buckets)."""
    receiver = WeightBucketReceiver()
    loaded = 0
    for bucket in buckets:
        ready = receiver.receive(bucket)
        if ready:
            update_weights(ready)
            loaded += len(ready)
    receiver.finish()
    return loaded


def receive_state_dict(buckets: Iterable[WeightBucket]) -> dict[str, torch.Tensor]:
    """Reassemble a whole state dict from buckets (for tests and simple engines)."""
    receiver = WeightBucketReceiver()
    state: dict[str, torch.Tensor] = {}
    for bucket in buckets:
        for name, tensor in receiver.receive(bucket):
            if name in state:
                raise ValueError(f"weight {name!r} was sent twice")
            state[name] = tensor
    receiver.finish()
    return state


def full_named_parameters(module: nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """``(name, full tensor)`` for every parameter; sharded (DTensor) parameters are gathered.

    Gathering is a collective: every rank of the training mesh must iterate in step.
    """
    from torch.distributed.tensor import DTensor

    for name, param in module.named_parameters():
        value = param.detach()
        yield name, value.full_tensor() if isinstance(value, DTensor) else value


@dataclass
class HFWeightCopy:
    """An HF module that receives weights by name (what :func:`sync_weights` feeds): the rollout's copy of
    the policy when the trainer's module is not one the decode loops read (Megatron shards, peft layers)."""

    def __init__(self, module: torch.nn.Module):
        self.module = module
        self._params = dict(module.named_parameters())

    def update_weights(self, weights) -> None:
        with torch.no_grad():
            for name, tensor in weights:
                if name not in self._params:
                    raise KeyError(f"the rollout's HF model has no parameter {name!r} (sent by the Megatron actor)")
                self._params[name].copy_(tensor.to(self._params[name].device))

    def load_weight_buckets(self, buckets) -> int:
        """What :func:`sync_weights` calls: reassemble the buckets into named tensors."""
        return load_buckets_into(self.update_weights, buckets)


class SyncStats:
    """What one :func:`sync_weights` call moved."""

    num_buckets: int = 0
    num_tensors: int = 0
    total_bytes: int = 0
    max_bucket_bytes: int = 0


def sync_weights(
    named_tensors: Iterable[tuple[str, torch.Tensor]], rollout, bucket_size_bytes: int = 512 << 20
) -> SyncStats:
    """Stream weights into ``rollout`` bucket by bucket (:meth:`BaseRollout.load_weight_buckets`)."""
    stats = SyncStats()

    def counted(buckets: Iterable[WeightBucket]) -> Iterator[WeightBucket]:
        for bucket in buckets:
            stats.num_buckets += 1
            stats.total_bytes += bucket.buffer.numel()
            stats.max_bucket_bytes = max(stats.max_bucket_bytes, bucket.buffer.numel())
            yield bucket

    stats.num_tensors = rollout.load_weight_buckets(
        counted(iter_weight_buckets(named_tensors, bucket_size_bytes))
    )
    return stats
