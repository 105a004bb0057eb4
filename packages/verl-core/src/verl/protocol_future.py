"""DataProtoFuture and upstream's module-level DataProto helpers (padding, batch-dim folding,
collate). Import them from `verl.protocol`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import torch

from verl.data_proto import DataProto
from verl.protocol_support import DataProtoItem
from verl.utils.batch_merge import as_object_array, list_of_dict_to_dict_of_list
from verl.utils.tensor_batch import TensorBatch

__all__ = [
    "DataProtoFuture",
    "pad_dataproto_to_divisor",
    "unpad_dataproto",
    "fold_batch_dim",
    "unfold_batch_dim",
    "collate_fn",
]

logger = logging.getLogger("verl.protocol")


def pad_dataproto_to_divisor(data: DataProto, size_divisor: int) -> tuple[DataProto, int]:
    """Append copies of the first rows (cycling) so len(data) divides by size_divisor.

    Returns (padded, pad_size); `unpad_dataproto(result, pad_size)` undoes it."""
    if not isinstance(data, DataProto):
        raise TypeError(f"pad_dataproto_to_divisor expects a DataProto, got {type(data).__name__}")
    if size_divisor <= 0:
        raise ValueError(f"size_divisor must be positive, got {size_divisor}")
    n = len(data)
    if n % size_divisor == 0:
        if n == 0:
            logger.warning("padding an empty DataProto: nothing to pad with")
        return data, 0
    pad_size = size_divisor - n % size_divisor
    if n == 0:
        raise ValueError(f"cannot pad an empty DataProto to a multiple of {size_divisor}: no rows to copy")
    pieces = [data]
    remaining = pad_size
    while remaining > 0:
        take = min(remaining, n)
        pieces.append(data.slice(0, take))
        remaining -= take
    return DataProto.concat(pieces), pad_size


def unpad_dataproto(data: DataProto, pad_size: int) -> DataProto:
    """Drop the last pad_size rows (the padding added by pad_dataproto_to_divisor)."""
    return data.slice(0, len(data) - pad_size) if pad_size else data


def _tensors(data: DataProto) -> list:
    """(key, tensor) pairs of ``data`` (none when it holds no tensors)."""
    return list(data.batch.items()) if data.batch is not None else []


def fold_batch_dim(data: DataProto, new_batch_size: int) -> DataProto:
    """[bsz, ...] -> [new_batch_size, bsz // new_batch_size, ...] for every tensor and array."""
    n = len(data)
    if new_batch_size <= 0 or n % new_batch_size:
        raise ValueError(f"fold_batch_dim: {n} rows do not divide into {new_batch_size} groups")
    tensors = {k: t.reshape(new_batch_size, n // new_batch_size, *t.shape[1:]) for k, t in _tensors(data)}
    non_tensors = {
        k: v.reshape(new_batch_size, n // new_batch_size, *v.shape[1:])
        for k, v in data.non_tensor_batch.items()
    }
    batch = TensorBatch._trusted(tensors, torch.Size((new_batch_size,)))
    return type(data)(batch=batch, non_tensor_batch=non_tensors, meta_info=data.meta_info)


def unfold_batch_dim(data: DataProto, batch_dims: int = 2) -> DataProto:
    """Merge the first batch_dims dims of every tensor and array into one batch dim."""
    tensors = {k: t.reshape(-1, *t.shape[batch_dims:]) for k, t in _tensors(data)}
    rows = next(iter(tensors.values())).shape[0] if tensors else 0
    non_tensors = {k: v.reshape(rows, *v.shape[batch_dims:]) for k, v in data.non_tensor_batch.items()}
    return type(data)(
        batch=TensorBatch(tensors, (rows,)), non_tensor_batch=non_tensors, meta_info=data.meta_info
    )


def collate_fn(x: list[DataProtoItem]) -> DataProto:
    """Stack a list of DataProtoItem (one row each) into a DataProto."""
    batch = TensorBatch.stack([d.batch for d in x if d.batch is not None]) if x and x[0].batch is not None else None
    non_tensor = list_of_dict_to_dict_of_list([d.non_tensor_batch for d in x])
    non_tensor_batch = {key: as_object_array(key, values) for key, values in non_tensor.items()}
    return DataProto(batch=batch, non_tensor_batch=non_tensor_batch)


def _take_chunk(data: DataProto, i: int, chunks: int) -> DataProto:
    return data.chunk(chunks=chunks)[i]


@dataclass
class DataProtoFuture:
    """A DataProto that is still being computed: Ray object refs plus how to combine them
    (`collect_fn`, e.g. DataProto.concat) and which part to take (`dispatch_fn`, set by `chunk`).

    Passed to another worker group, each worker calls `get()` itself, so the data goes from the
    object store to the consumer without passing through the driver."""

    collect_fn: Callable
    futures: list
    dispatch_fn: Callable | None = None

    @staticmethod
    def concat(data: list) -> DataProtoFuture:
        """A future for the row-wise concatenation of the DataProtos behind `data` (object refs)."""
        return DataProtoFuture(collect_fn=DataProto.concat, futures=list(data))

    def chunk(self, chunks: int) -> list[DataProtoFuture]:
        """`chunks` futures; the i-th resolves to chunk i of this future's DataProto."""
        return [
            DataProtoFuture(
                collect_fn=self.collect_fn,
                futures=self.futures,
                dispatch_fn=partial(_take_chunk, i=i, chunks=chunks),
            )
            for i in range(chunks)
        ]

    def get(self) -> DataProto:
        import ray

        outputs = ray.get(self.futures)
        for i, out in enumerate(outputs):
            if not isinstance(out, DataProto):
                raise TypeError(
                    f"DataProtoFuture: object ref {i} resolved to a {type(out).__name__}, not a DataProto"
                )
        result = self.collect_fn(outputs)
        if self.dispatch_fn is not None:
            result = self.dispatch_fn(result)
        return result
