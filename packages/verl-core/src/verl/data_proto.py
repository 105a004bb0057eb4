"""DataProto: the batch that flows between the driver and worker groups (upstream verl's API).

A DataProto holds
- `batch`: a `TensorBatch` (TensorDict-like) of tensors sharing dim 0 (N rows),
- `non_tensor_batch`: dict of numpy arrays (usually dtype=object) with N rows,
- `meta_info`: a plain dict that travels with the batch (not split by row).

Row operations (index, slice, chunk, concat, repeat) apply to the tensors and the numpy arrays
alike. Ray is not imported here: `DataProtoFuture.get` imports it when called.

Import it from `verl.protocol` (or `verl`), upstream's module, which also holds DataProtoItem,
DataProtoConfig, DataProtoFuture and the module-level helpers. This module is the lowest of the three
(`verl.protocol_future`'s helpers build on the class), so nothing here imports them.
"""

from __future__ import annotations

import copy
import os
import pickle
from collections.abc import Iterator
from typing import Any, overload

import numpy as np
import torch

from verl.protocol_support import (
    DataProtoConfig,
    DataProtoItem,
    _repeat_rows,
    _to_tensor_batch,
    check_consistency,
    make_row_iterator,
)
from verl.utils.batch_merge import (
    DataProtoCheckError,
    DataProtoTypeError,
    as_object_array,
    merge_meta_info,
    type_info,
    union_numpy_dict,
    union_tensor_dict,
    union_two_dict,
)
from verl.utils.tensor_batch import TensorBatch, normalize_row_index

__all__ = ["DataProto", "unfold_column_chunks"]


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
            raise DataProtoCheckError(f"num_batch_dims must be positive, got {num_batch_dims}")
        tensors = tensors or {}
        non_tensors = non_tensors or {}
        meta_info = {} if meta_info is None else meta_info
        if non_tensors and num_batch_dims != 1:
            raise DataProtoCheckError(f"non_tensors need num_batch_dims=1, got {num_batch_dims}")
        batch_size = pivot = None
        for key, tensor in tensors.items():
            if not isinstance(tensor, torch.Tensor):
                raise DataProtoTypeError(
                    f"tensors[{key!r}] must be a torch.Tensor, got {type(tensor).__name__}"
                )
            if tensor.dim() < num_batch_dims:
                raise DataProtoCheckError(
                    f"tensors[{key!r}] has {tensor.dim()} dims, fewer than num_batch_dims={num_batch_dims}"
                )
            if batch_size is None:
                batch_size, pivot = tensor.shape[:num_batch_dims], key
            elif tensor.shape[:num_batch_dims] != batch_size:
                raise DataProtoCheckError(
                    f"tensors disagree on the batch size: {pivot!r} has {tuple(batch_size)}, "
                    f"{key!r} has {tuple(tensor.shape[:num_batch_dims])} (num_batch_dims={num_batch_dims})"
                )
        non_tensor_batch = {key: as_object_array(key, val) for key, val in non_tensors.items()}
        batch = TensorBatch._trusted(dict(tensors), batch_size) if batch_size is not None else None
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
        check_consistency(self)

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
    @overload
    def __getitem__(self, item: int | np.integer) -> DataProtoItem: ...
    @overload
    def __getitem__(self, item: slice | list | np.ndarray | torch.Tensor) -> DataProto: ...
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
            batch: TensorBatch | None = self.batch.select(*batch_keys)
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
        if batch_keys and self.batch is None:
            raise KeyError(f"pop: batch_keys {list(batch_keys)} requested but this DataProto has no tensors")
        tensors = {key: self.batch.pop(key) for key in batch_keys or ()} if self.batch is not None else {}
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
        if self.batch is None:
            raise KeyError(f"rename: {old_keys} requested but this DataProto has no tensors")
        self.batch.rename_key_(tuple(old_keys), tuple(new_keys))
        return self

    def union(self, other: DataProto) -> DataProto:
        """Merge other's keys into self (in place, returned). Shared keys must hold equal values."""
        has_rows = [d.batch is not None or bool(d.non_tensor_batch) for d in (self, other)]
        if all(has_rows) and len(self) != len(other):
            raise DataProtoCheckError(f"union: the DataProtos have {len(self)} and {len(other)} rows")
        if self.batch is None:
            self.batch = other.batch
        elif other.batch is not None and not self.batch._add_disjoint(other.batch):
            # shared keys (must hold equal tensors) or a size mismatch: the checked merge
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
            raise DataProtoCheckError(f"chunk: chunks must be positive, got {chunks}")
        n = len(self)
        if n % chunks and not self.is_padding_enabled():
            raise DataProtoCheckError(
                f"only support equal chunk: {n} rows do not split into {chunks} chunks; "
                f"pad first (pad_dataproto_to_divisor) or enable DataProtoConfig.auto_padding"
            )
        step = -(-n // chunks)
        bounds = [(min(i * step, n), min((i + 1) * step, n)) for i in range(chunks)]
        if self.batch is not None:
            # one split call per tensor instead of one slice per tensor per chunk; the C-bound
            # split_with_sizes skips Tensor.split's Python wrapper (same op underneath, ~25% of chunk)
            sizes = [b - a for a, b in bounds]
            pieces = {k: t.split_with_sizes(sizes) for k, t in self.batch.items()}
            rest = self.batch.batch_size[1:]
            batches: list[TensorBatch | None] = [
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
            raise DataProtoCheckError("DataProto.concat needs at least one DataProto")
        has_batch = [d.batch is not None for d in data]
        if any(has_batch) and not all(has_batch):
            raise DataProtoCheckError(
                f"DataProto.concat: batches {[i for i, h in enumerate(has_batch) if not h]} have no tensors, others do"
            )
        batch = TensorBatch.cat([d.batch for d in data if d.batch is not None]) if has_batch[0] else None
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

    def unfold_column_chunks(self, n_split: int, split_keys: list[str] | None = None) -> DataProto:
        """Cut the second dim of ``split_keys`` into ``n_split`` rows each; repeat the other keys."""
        return unfold_column_chunks(self, n_split, split_keys)

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
        return make_row_iterator(self, mini_batch_size, epochs, seed, dataloader_kwargs)

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


def unfold_column_chunks(data: DataProto, n_split: int, split_keys: list[str] | None = None) -> DataProto:
    """Row i becomes n_split rows: the second dim of each ``split_keys`` entry is cut into n_split
    chunks (chunk j goes to row i * n_split + j); every other key is repeated n_split times. With
    ``split_keys=None`` every key is repeated (``DataProto.unfold_column_chunks``)."""
    if not isinstance(n_split, int) or n_split < 1:
        raise ValueError(f"unfold_column_chunks: n_split must be a positive int, got {n_split!r}")
    keys = set(split_keys or [])
    known = set(data.batch.keys() if data.batch is not None else []) | set(data.non_tensor_batch)
    if keys - known:
        raise KeyError(f"unfold_column_chunks: split_keys {sorted(keys - known)} not in the data; keys: {sorted(known)}")

    def unfold(key: str, value):
        if key not in keys:
            if isinstance(value, torch.Tensor):
                return value.repeat_interleave(n_split, dim=0)
            return np.repeat(value, n_split, axis=0)
        if value.ndim < 2 or value.shape[1] % n_split:
            raise ValueError(
                f"unfold_column_chunks: {key!r} has shape {tuple(value.shape)}; its second dim must exist "
                f"and divide into n_split={n_split} chunks"
            )
        return value.reshape(value.shape[0] * n_split, value.shape[1] // n_split, *value.shape[2:])

    rows = len(data) * n_split
    batch = None
    if data.batch is not None:
        batch = TensorBatch._trusted({k: unfold(k, t) for k, t in data.batch.items()}, torch.Size((rows,)))
    non_tensors = {k: unfold(k, v) for k, v in data.non_tensor_batch.items()}
    return type(data)(batch=batch, non_tensor_batch=non_tensors, meta_info=data.meta_info)
