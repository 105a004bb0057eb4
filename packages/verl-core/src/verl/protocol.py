"""DataProto: the batch that flows between the driver and worker groups (upstream verl's API).

A DataProto holds
- `batch`: a `TensorBatch` (TensorDict-like) of tensors sharing dim 0 (N rows),
- `non_tensor_batch`: dict of numpy arrays (usually dtype=object) with N rows,
- `meta_info`: a plain dict that travels with the batch (not split by row).

Row operations (index, slice, chunk, concat, repeat) apply to the tensors and the numpy arrays
alike. Ray is not imported here: `DataProtoFuture.get` imports it when called.
"""

from __future__ import annotations

import copy
import logging
import os
import pickle
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np
import torch

from verl.utils.batch_merge import (
    as_object_array,
    list_of_dict_to_dict_of_list,
    merge_meta_info,
    type_info,
    union_numpy_dict,
    union_tensor_dict,
    union_two_dict,
)
from verl.utils.hugepage_alloc import empty_cpu, wants_fresh_buffer
from verl.utils.tensor_batch import TensorBatch, normalize_row_index

__all__ = [
    "DataProto",
    "DataProtoItem",
    "DataProtoFuture",
    "DataProtoConfig",
    "TensorBatch",
    "pad_dataproto_to_divisor",
    "unpad_dataproto",
    "union_tensor_dict",
    "union_numpy_dict",
    "union_two_dict",
    "fold_batch_dim",
    "unfold_batch_dim",
    "collate_fn",
    "list_of_dict_to_dict_of_list",
]

logger = logging.getLogger(__name__)


class _DataProtoConfigMeta(type):
    """Class-level switch `DataProtoConfig.auto_padding` (True also when VERL_AUTO_PADDING is 1/true)."""

    _config: dict = {}
    auto_padding_key = "_verl_auto_padding"

    @property
    def auto_padding(cls) -> bool:
        by_env = os.getenv("VERL_AUTO_PADDING", "FALSE").upper() in ("TRUE", "1")
        return by_env or cls._config.get(cls.auto_padding_key, False)

    @auto_padding.setter
    def auto_padding(cls, enabled: bool) -> None:
        if not isinstance(enabled, bool):
            raise TypeError(f"DataProtoConfig.auto_padding must be a bool, got {enabled!r}")
        cls._config[cls.auto_padding_key] = enabled


class DataProtoConfig(metaclass=_DataProtoConfigMeta):
    """Global DataProto settings; `DataProtoConfig.auto_padding = True` lets `chunk` split unevenly."""


# Key under which dispatch passes the number of padded rows to the collect side.
_padding_size_key = "_padding_size_key_x123d"


# ---------------------------------------------------------------------------- module functions
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


def fold_batch_dim(data: DataProto, new_batch_size: int) -> DataProto:
    """[bsz, ...] -> [new_batch_size, bsz // new_batch_size, ...] for every tensor and array."""
    n = len(data)
    if new_batch_size <= 0 or n % new_batch_size:
        raise ValueError(f"fold_batch_dim: {n} rows do not divide into {new_batch_size} groups")
    tensors = {k: t.reshape(new_batch_size, n // new_batch_size, *t.shape[1:]) for k, t in data.batch.items()}
    non_tensors = {
        k: v.reshape(new_batch_size, n // new_batch_size, *v.shape[1:])
        for k, v in data.non_tensor_batch.items()
    }
    batch = TensorBatch._trusted(tensors, torch.Size((new_batch_size,)))
    return type(data)(batch=batch, non_tensor_batch=non_tensors, meta_info=data.meta_info)


def unfold_batch_dim(data: DataProto, batch_dims: int = 2) -> DataProto:
    """Merge the first batch_dims dims of every tensor and array into one batch dim."""
    tensors = {k: t.reshape(-1, *t.shape[batch_dims:]) for k, t in data.batch.items()}
    rows = next(iter(tensors.values())).shape[0] if tensors else 0
    non_tensors = {k: v.reshape(rows, *v.shape[batch_dims:]) for k, v in data.non_tensor_batch.items()}
    return type(data)(
        batch=TensorBatch(tensors, (rows,)), non_tensor_batch=non_tensors, meta_info=data.meta_info
    )


def collate_fn(x: list[DataProtoItem]) -> DataProto:
    """Stack a list of DataProtoItem (one row each) into a DataProto."""
    batch = TensorBatch.stack([d.batch for d in x]) if x and x[0].batch is not None else None
    non_tensor = list_of_dict_to_dict_of_list([d.non_tensor_batch for d in x])
    non_tensor_batch = {key: as_object_array(key, values) for key, values in non_tensor.items()}
    return DataProto(batch=batch, non_tensor_batch=non_tensor_batch)


# ---------------------------------------------------------------------------- DataProtoItem
@dataclass
class DataProtoItem:
    """One row of a DataProto: `batch` is a TensorBatch with batch_size ()."""

    batch: TensorBatch | None = None
    non_tensor_batch: dict = field(default_factory=dict)
    meta_info: dict = field(default_factory=dict)


# ---------------------------------------------------------------------------- DataProto
class DataProto:
    """A batch of N rows: tensors (`batch`), numpy arrays (`non_tensor_batch`) and `meta_info`."""

    def __init__(
        self,
        batch: TensorBatch | dict | None = None,
        non_tensor_batch: dict[str, np.ndarray] | None = None,
        meta_info: dict | None = None,
    ):
        if batch is not None and not isinstance(batch, TensorBatch):
            batch = _to_tensor_batch(batch)
        self.batch = batch
        self.non_tensor_batch = non_tensor_batch if non_tensor_batch is not None else {}
        self.meta_info = meta_info if meta_info is not None else {}
        self.check_consistency()

    @classmethod
    def _trusted(cls, batch: TensorBatch | None, non_tensor_batch: dict, meta_info: dict) -> DataProto:
        """Build without re-checking; for results derived row-consistently from a checked DataProto."""
        out = cls.__new__(cls)
        out.batch = batch
        out.non_tensor_batch = non_tensor_batch
        out.meta_info = meta_info
        return out

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_dict(
        cls,
        tensors: dict[str, torch.Tensor] | None = None,
        non_tensors: dict[str, Any] | None = None,
        meta_info: dict | None = None,
        num_batch_dims: int = 1,
        auto_padding: bool = False,
    ) -> DataProto:
        """Build from a dict of tensors (sharing their first num_batch_dims dims), a dict of numpy
        arrays or lists (converted to object arrays) and meta_info."""
        if num_batch_dims <= 0:
            raise ValueError(f"num_batch_dims must be positive, got {num_batch_dims}")
        tensors = tensors or {}
        non_tensors = non_tensors or {}
        meta_info = {} if meta_info is None else meta_info
        if non_tensors and num_batch_dims != 1:
            raise ValueError(f"non_tensors need num_batch_dims=1, got {num_batch_dims}")
        batch_size = pivot = None
        for key, tensor in tensors.items():
            if not isinstance(tensor, torch.Tensor):
                raise TypeError(f"tensors[{key!r}] must be a torch.Tensor, got {type(tensor).__name__}")
            if tensor.dim() < num_batch_dims:
                raise ValueError(
                    f"tensors[{key!r}] has {tensor.dim()} dims, fewer than num_batch_dims={num_batch_dims}"
                )
            if batch_size is None:
                batch_size, pivot = tensor.shape[:num_batch_dims], key
            elif tensor.shape[:num_batch_dims] != batch_size:
                raise ValueError(
                    f"tensors disagree on the batch size: {pivot!r} has {tuple(batch_size)}, "
                    f"{key!r} has {tuple(tensor.shape[:num_batch_dims])} (num_batch_dims={num_batch_dims})"
                )
        non_tensor_batch = {key: as_object_array(key, val) for key, val in non_tensors.items()}
        batch = TensorBatch._trusted(dict(tensors), batch_size) if tensors else None
        if auto_padding:
            meta_info[DataProtoConfig.auto_padding_key] = True
        return cls(batch=batch, non_tensor_batch=non_tensor_batch, meta_info=meta_info)

    @classmethod
    def from_single_dict(
        cls, data: dict[str, Any], meta_info: dict | None = None, auto_padding: bool = False
    ) -> DataProto:
        """Split one dict into tensors (torch.Tensor values) and non-tensors (numpy arrays)."""
        tensors, non_tensors = {}, {}
        for key, val in data.items():
            if isinstance(val, torch.Tensor):
                tensors[key] = val
            elif isinstance(val, np.ndarray):
                non_tensors[key] = val
            else:
                raise TypeError(
                    f"from_single_dict: {key!r} is a {type(val).__name__}; expected torch.Tensor or numpy.ndarray"
                )
        return cls.from_dict(
            tensors=tensors, non_tensors=non_tensors, meta_info=meta_info, auto_padding=auto_padding
        )

    @classmethod
    def from_tensordict(
        cls, tensor_dict: Any, meta_info: dict | None = None, num_batch_dims: int = 1
    ) -> DataProto:
        """Build from a `tensordict.TensorDict`: tensors go to `batch`, NonTensorStack entries to
        `non_tensor_batch`, NonTensorData entries to `meta_info`. Needs the optional `tensordict`."""
        from verl.utils.tensordict_interop import dataproto_from_tensordict

        return dataproto_from_tensordict(cls, tensor_dict, meta_info, num_batch_dims)

    def to_tensordict(self):
        """A `tensordict.TensorDict` with the tensors, non-tensors (as NonTensorStack) and meta_info
        (as NonTensorData). Needs the optional `tensordict` package."""
        from verl.utils.tensordict_interop import dataproto_to_tensordict

        return dataproto_to_tensordict(self)

    # ------------------------------------------------------------------ checks and info
    def check_consistency(self) -> None:
        """Raise if any tensor or array disagrees with the batch's row count, or has the wrong type."""
        if self.batch is not None and len(self.batch.batch_size) != 1 and self.non_tensor_batch:
            raise ValueError(
                f"a batch with non_tensor_batch must have one batch dim, got batch size {tuple(self.batch.batch_size)}"
            )
        if not isinstance(self.non_tensor_batch, dict):
            raise TypeError(f"non_tensor_batch must be a dict, got {type(self.non_tensor_batch).__name__}")
        if not isinstance(self.meta_info, dict):
            raise TypeError(f"meta_info must be a dict, got {type(self.meta_info).__name__}")
        n = pivot = None
        if self.batch is not None:
            n, pivot = self.batch.batch_size[0] if self.batch.batch_size else None, "batch"
        for key, val in self.non_tensor_batch.items():
            if not isinstance(val, np.ndarray):
                raise TypeError(
                    f"non_tensor_batch[{key!r}] must be a numpy array (dtype=object), got {type(val).__name__}"
                )
            if val.ndim == 0:
                raise ValueError(f"non_tensor_batch[{key!r}] is a 0-d array; it needs one entry per row")
            if n is None:
                n, pivot = val.shape[0], f"non_tensor_batch[{key!r}]"
            elif val.shape[0] != n:
                raise ValueError(f"non_tensor_batch[{key!r}] has {val.shape[0]} rows but {pivot} has {n}")

    def __len__(self) -> int:
        if self.batch is not None:
            return self.batch.batch_size[0]
        for val in self.non_tensor_batch.values():
            return val.shape[0]
        return 0

    def get_data_info(self) -> str:
        """A multi-line description: keys, shapes, dtypes and devices."""
        lines = ["batch"]
        for key, t in self.batch.items() if self.batch is not None else ():
            lines.append(f"  {key}: {tuple(t.shape)} ({t.dtype}) {t.device}")
        lines.append("non_tensor_batch")
        for key, arr in self.non_tensor_batch.items():
            lines.append(f"  {key}: ndarray{arr.shape} ({arr.dtype})")
        lines.append("meta_info")
        for key, val in self.meta_info.items():
            lines.append(f"  {key}: {type_info(val)}")
        return "\n".join(lines)

    def print_size(self, prefix: str = "") -> None:
        """Print the tensor and numpy payload sizes in GB."""
        tensor_gb = (
            sum(t.element_size() * t.numel() for t in self.batch.values()) if self.batch is not None else 0
        )
        numpy_gb = sum(a.nbytes for a in self.non_tensor_batch.values())
        message = (
            f"Size of tensordict: {tensor_gb / 1024**3} GB, size of non_tensor_batch: {numpy_gb / 1024**3} GB"
        )
        print(f"{prefix}, {message}" if prefix else message)

    def __repr__(self) -> str:
        return f"DataProto(len={len(self)}, batch={self.batch!r}, non_tensor_keys={list(self.non_tensor_batch)}, meta_info_keys={list(self.meta_info)})"

    # ------------------------------------------------------------------ indexing
    def __getitem__(self, item: Any) -> DataProto | DataProtoItem:
        if isinstance(item, slice):
            return self.slice(item.start, item.stop, item.step)
        if isinstance(item, (list, np.ndarray, torch.Tensor)):
            return self.select_idxs(item)
        if isinstance(item, (int, np.integer)):
            n = len(self)
            if not -n <= int(item) < n:
                raise IndexError(f"row {int(item)} is out of range for a DataProto of {n} rows")
            batch = self.batch[int(item)] if self.batch is not None else None
            non_tensor = {key: val[item] for key, val in self.non_tensor_batch.items()}
            return DataProtoItem(batch=batch, non_tensor_batch=non_tensor, meta_info=self.meta_info)
        raise TypeError(
            f"DataProto cannot be indexed by {type(item).__name__}; use int, slice, list, array, tensor or bool mask"
        )

    def select_idxs(self, idxs: list | np.ndarray | torch.Tensor) -> DataProto:
        """Rows at integer positions `idxs` (negative allowed) or where the bool mask `idxs` is True."""
        index = normalize_row_index(idxs, len(self))
        batch = self.batch.index_rows(index) if self.batch is not None else None
        index_np = index.numpy()
        non_tensor = {key: val[index_np] for key, val in self.non_tensor_batch.items()}
        return type(self)._trusted(batch, non_tensor, self.meta_info)

    def slice(self, start: int | None = None, end: int | None = None, step: int | None = None) -> DataProto:
        """Rows [start:end:step] as views (no copy), like Python slicing."""
        sl = slice(start, end, step)
        batch = self.batch._rows_slice(sl) if self.batch is not None else None
        non_tensor = {key: val[sl] for key, val in self.non_tensor_batch.items()}
        return type(self)._trusted(batch, non_tensor, self.meta_info)

    def reorder(self, indices: torch.Tensor | np.ndarray | list) -> None:
        """Permute rows in place: row i becomes old row indices[i]."""
        index = normalize_row_index(indices, len(self))
        if self.batch is not None:
            self.batch = self.batch.index_rows(index)
        index_np = index.numpy()
        self.non_tensor_batch = {key: val[index_np] for key, val in self.non_tensor_batch.items()}

    # ------------------------------------------------------------------ keys
    def select(
        self,
        batch_keys: list[str] | None = None,
        non_tensor_batch_keys: list[str] | None = None,
        meta_info_keys: list[str] | None = None,
        deepcopy: bool = False,
    ) -> DataProto:
        """A DataProto with only the named keys (None keeps everything). Tensors are shared;
        deepcopy=True copies the non-tensor arrays and meta_info. A missing batch key is a KeyError;
        missing non-tensor / meta_info keys are skipped (upstream behaviour)."""
        if batch_keys is not None:
            if self.batch is None:
                raise KeyError(
                    f"select: batch_keys {list(batch_keys)} requested but this DataProto has no tensors"
                )
            batch = self.batch.select(*batch_keys)
        else:
            batch = self.batch
        # Non-tensor and meta keys that are absent are skipped, as upstream does (callers pass
        # optional keys); tensor keys are strict, as TensorDict.select is.
        if non_tensor_batch_keys is not None:
            non_tensor = {
                k: self.non_tensor_batch[k] for k in non_tensor_batch_keys if k in self.non_tensor_batch
            }
        else:
            non_tensor = dict(self.non_tensor_batch)
        if meta_info_keys is not None:
            meta = {k: self.meta_info[k] for k in meta_info_keys if k in self.meta_info}
        else:
            meta = self.meta_info
        if deepcopy:
            non_tensor = copy.deepcopy(non_tensor)
            meta = copy.deepcopy(meta)
        return type(self)._trusted(batch, non_tensor, meta)

    def pop(
        self,
        batch_keys: list[str] | None = None,
        non_tensor_batch_keys: list[str] | None = None,
        meta_info_keys: list[str] | None = None,
    ) -> DataProto:
        """Remove the named keys from self and return them as a new DataProto."""
        tensors = {key: self.batch.pop(key) for key in batch_keys or ()}
        non_tensors = {}
        for key in non_tensor_batch_keys or ():
            if key not in self.non_tensor_batch:
                raise KeyError(
                    f"pop: non_tensor_batch key {key!r} not present; have {sorted(self.non_tensor_batch)}"
                )
            non_tensors[key] = self.non_tensor_batch.pop(key)
        meta = {}
        for key in meta_info_keys or ():
            if key not in self.meta_info:
                raise KeyError(f"pop: meta_info key {key!r} not present; have {sorted(self.meta_info)}")
            meta[key] = self.meta_info.pop(key)
        return type(self).from_dict(tensors=tensors, non_tensors=non_tensors, meta_info=meta)

    def rename(
        self, old_keys: str | list[str] | None = None, new_keys: str | list[str] | None = None
    ) -> DataProto:
        """Rename batch keys in place (old_keys[i] -> new_keys[i]); returns self."""

        def as_list(keys, name):
            if isinstance(keys, str):
                return [keys]
            if isinstance(keys, list):
                return keys
            raise TypeError(
                f"rename: {name} must be a string or a list of strings, got {type(keys).__name__}"
            )

        old_keys, new_keys = as_list(old_keys, "old_keys"), as_list(new_keys, "new_keys")
        if len(old_keys) != len(new_keys):
            raise ValueError(
                f"rename: {len(old_keys)} old keys {old_keys} but {len(new_keys)} new keys {new_keys}"
            )
        self.batch.rename_key_(tuple(old_keys), tuple(new_keys))
        return self

    def union(self, other: DataProto) -> DataProto:
        """Merge other's keys into self (in place, returned). Shared keys must hold equal values."""
        has_rows = [d.batch is not None or bool(d.non_tensor_batch) for d in (self, other)]
        if all(has_rows) and len(self) != len(other):
            raise ValueError(f"union: the DataProtos have {len(self)} and {len(other)} rows")
        if self.batch is None:
            self.batch = other.batch
        elif other.batch is not None:
            self.batch = union_tensor_dict(self.batch, other.batch)
        self.non_tensor_batch = union_numpy_dict(self.non_tensor_batch, other.non_tensor_batch)
        self.meta_info = union_two_dict(self.meta_info, other.meta_info)
        return self

    def to(self, device: str | torch.device) -> DataProto:
        """Move the tensors to device (in place); returns self."""
        if self.batch is not None:
            self.batch = self.batch.to(device)
        return self

    # ------------------------------------------------------------------ splitting and joining
    def is_padding_enabled(self) -> bool:
        return (
            bool(self.meta_info.get(DataProtoConfig.auto_padding_key, False)) or DataProtoConfig.auto_padding
        )

    def chunk(self, chunks: int) -> list[DataProto]:
        """Split into `chunks` pieces of equal rows (views). With auto padding enabled the row count
        need not divide: pieces then have ceil(n / chunks) rows (torch.chunk sizes), the trailing
        ones fewer (possibly zero), so there are always exactly `chunks` pieces."""
        if chunks <= 0:
            raise ValueError(f"chunk: chunks must be positive, got {chunks}")
        n = len(self)
        if n % chunks and not self.is_padding_enabled():
            raise ValueError(
                f"only support equal chunk: {n} rows do not split into {chunks} chunks; "
                f"pad first (pad_dataproto_to_divisor) or enable DataProtoConfig.auto_padding"
            )
        step = -(-n // chunks)
        bounds = [(min(i * step, n), min((i + 1) * step, n)) for i in range(chunks)]
        if self.batch is not None:
            # one split call per tensor instead of one slice per tensor per chunk
            sizes = [b - a for a, b in bounds]
            pieces = {k: t.split(sizes) for k, t in self.batch.items()}
            rest = self.batch.batch_size[1:]
            batches = [
                TensorBatch._trusted({k: p[i] for k, p in pieces.items()}, torch.Size((sizes[i], *rest)))
                for i in range(chunks)
            ]
        else:
            batches = [None] * chunks
        return [
            type(self)._trusted(
                batches[i], {k: v[a:b] for k, v in self.non_tensor_batch.items()}, self.meta_info
            )
            for i, (a, b) in enumerate(bounds)
        ]

    def split(self, split_size: int) -> list[DataProto]:
        """Pieces of split_size rows (the last may be shorter)."""
        if split_size <= 0:
            raise ValueError(f"split: split_size must be positive, got {split_size}")
        return [self.slice(i, i + split_size) for i in range(0, len(self), split_size)]

    @staticmethod
    def concat(data: list[DataProto]) -> DataProto:
        """Join DataProtos row-wise. meta_info: equal values are kept, `metrics` are gathered into
        lists (dict name -> list), different values under one key are an error naming the key."""
        data = list(data)
        if not data:
            raise ValueError("DataProto.concat needs at least one DataProto")
        has_batch = [d.batch is not None for d in data]
        if any(has_batch) and not all(has_batch):
            raise ValueError(
                f"DataProto.concat: batches {[i for i, h in enumerate(has_batch) if not h]} have no tensors, others do"
            )
        batch = TensorBatch.cat([d.batch for d in data]) if has_batch[0] else None
        keys = data[0].non_tensor_batch.keys()
        non_tensor = {}
        for i, d in enumerate(data[1:], 1):
            if d.non_tensor_batch.keys() != keys:
                raise KeyError(
                    f"DataProto.concat: batch {i} has non_tensor_batch keys {sorted(d.non_tensor_batch)}, "
                    f"batch 0 has {sorted(keys)}"
                )
        for key in keys:
            non_tensor[key] = np.concatenate([d.non_tensor_batch[key] for d in data], axis=0)
        meta = merge_meta_info([d.meta_info for d in data])
        return type(data[0])._trusted(batch, non_tensor, meta)

    def padding(self, padding_size: int, padding_candidate: str = "") -> None:
        """Append padding_size copies of the last row (or the first, if padding_candidate ==
        "first"), in place."""
        if padding_size == 0:
            return
        candidate = self.select_idxs([0 if padding_candidate == "first" else len(self) - 1])
        padded = DataProto.concat([self, candidate.repeat(padding_size)])
        self.batch = padded.batch
        self.non_tensor_batch = padded.non_tensor_batch

    def repeat(self, repeat_times: int = 2, interleave: bool = True) -> DataProto:
        """Repeat every row repeat_times: interleave=True gives a a b b, False gives a b a b."""
        n = len(self)
        if self.batch is not None:
            tensors = {}
            for key, t in self.batch.items():
                tensors[key] = _repeat_rows(t, repeat_times, interleave)
            batch = TensorBatch._trusted(tensors, torch.Size((n * repeat_times, *self.batch.batch_size[1:])))
        else:
            batch = None
        non_tensor = {}
        for key, val in self.non_tensor_batch.items():
            if interleave:
                non_tensor[key] = np.repeat(val, repeat_times, axis=0)
            else:
                non_tensor[key] = np.tile(val, (repeat_times,) + (1,) * (val.ndim - 1))
        return type(self)._trusted(batch, non_tensor, self.meta_info)

    def sample_level_repeat(self, repeat_times: list[int] | tuple | np.ndarray | torch.Tensor) -> DataProto:
        """Repeat row i repeat_times[i] times (rows stay in order; 0 drops the row)."""
        if isinstance(repeat_times, torch.Tensor):
            counts = repeat_times.detach().cpu().numpy()
        else:
            counts = np.asarray(repeat_times)
        if counts.ndim != 1 or counts.shape[0] != len(self):
            raise ValueError(
                f"sample_level_repeat: repeat_times has shape {counts.shape}, expected ({len(self)},)"
            )
        if counts.size and (not np.issubdtype(counts.dtype, np.integer) or counts.min() < 0):
            raise ValueError(
                f"sample_level_repeat: repeat_times must be non-negative integers, got {counts.tolist()}"
            )
        index = torch.from_numpy(np.repeat(np.arange(len(self)), counts))
        return self.select_idxs(index)

    # ------------------------------------------------------------------ iteration
    def make_iterator(
        self,
        mini_batch_size: int,
        epochs: int,
        seed: int | None = None,
        dataloader_kwargs: dict | None = None,
    ) -> Iterator[DataProto]:
        """Yield mini-batches of mini_batch_size rows for `epochs` passes, via a torch DataLoader
        (pass e.g. dataloader_kwargs={"shuffle": True}; `seed` fixes the shuffle order)."""
        if len(self) % mini_batch_size:
            raise ValueError(
                f"make_iterator: {len(self)} rows do not divide into mini-batches of {mini_batch_size}"
            )
        dataloader_kwargs = dict(dataloader_kwargs or {})
        if "collate_fn" in dataloader_kwargs:
            raise ValueError(
                "make_iterator: collate_fn is set by DataProto and cannot be passed in dataloader_kwargs"
            )
        generator = torch.Generator().manual_seed(seed) if seed is not None else None
        from torch.utils.data import DataLoader

        loader = DataLoader(
            dataset=_RowDataset(self),
            batch_size=mini_batch_size,
            collate_fn=_identity_collate,
            generator=generator,
            **dataloader_kwargs,
        )
        meta_info = self.meta_info

        def batches():
            for _ in range(epochs):
                for mini_batch in loader:
                    mini_batch.meta_info = meta_info
                    yield mini_batch

        return batches()

    # ------------------------------------------------------------------ persistence
    def save_to_disk(self, filepath: str | os.PathLike) -> None:
        with open(filepath, "wb") as f:
            pickle.dump(self, f, protocol=pickle.HIGHEST_PROTOCOL)

    @staticmethod
    def load_from_disk(filepath: str | os.PathLike) -> DataProto:
        with open(filepath, "rb") as f:
            data = pickle.load(f)
        if not isinstance(data, DataProto):
            raise TypeError(f"{filepath} holds a {type(data).__name__}, not a DataProto")
        return data

    def __getstate__(self):
        return self.batch, self.non_tensor_batch, self.meta_info

    def __setstate__(self, state) -> None:
        self.batch, self.non_tensor_batch, self.meta_info = state


class _RowDataset:
    """Map-style dataset over a DataProto's rows; `__getitems__` lets DataLoader fetch a whole
    mini-batch with one index_select instead of N single-row items plus a stack."""

    def __init__(self, data: DataProto):
        self.data = data

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, i: int) -> DataProtoItem:
        return self.data[i]

    def __getitems__(self, indices: list[int]) -> DataProto:
        return self.data.select_idxs(indices)


def _repeat_rows(t: torch.Tensor, times: int, interleave: bool) -> torch.Tensor:
    """Rows a a b b (interleave) or a b a b, with one copy from a broadcast view (cheaper than
    repeat_interleave's gather), into a huge-page-advised buffer when the result is large."""
    n, rest = t.shape[0], t.shape[1:]
    view = t.unsqueeze(1).expand(n, times, *rest) if interleave else t.unsqueeze(0).expand(times, n, *rest)
    if wants_fresh_buffer(t, t.numel() * times * t.element_size()):
        out = empty_cpu((n * times, *rest), t.dtype)
        out.view(view.shape).copy_(view)
        return out
    return view.reshape(n * times, *rest)


def _identity_collate(batch: DataProto) -> DataProto:
    return batch


def _to_tensor_batch(batch: Any) -> TensorBatch:
    """Accept a tensordict.TensorDict (upstream code builds those) or a plain dict of tensors."""
    from verl.utils.tensordict_interop import is_tensordict

    if is_tensordict(batch):
        return TensorBatch(batch.to_dict(), batch.batch_size)
    if isinstance(batch, dict):
        return TensorBatch(batch)
    raise TypeError(
        f"DataProto.batch must be a TensorBatch, TensorDict or dict of tensors, got {type(batch).__name__}"
    )


# ---------------------------------------------------------------------------- DataProtoFuture
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
