"""TensorBatch: a small TensorDict-like mapping of tensors that share their leading (batch) dims.

`DataProto.batch` is one of these. It covers the part of `tensordict.TensorDict` that verl code
uses (`batch["k"]`, `batch["k"] = t`, `keys/items/values`, `batch_size`, `update`, `select`,
`to`, `clone`, row indexing, `torch.cat`/`torch.stack`) over a plain dict, which keeps every
operation a thin loop over the tensors and keeps `import verl` free of the tensordict library.

Pickling writes each tensor's memory as one `pickle.PickleBuffer` (protocol 5), so a batch
pickles with one memcpy per tensor and Ray can ship the buffers out of band.
"""

from __future__ import annotations

import math
import pickle
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import numpy as np
import torch

from verl.utils.hugepage_alloc import empty_cpu, wants_fresh_buffer

__all__ = ["TensorBatch", "normalize_row_index"]

_CPU = torch.device("cpu")


def normalize_row_index(index: Any, num_rows: int) -> torch.Tensor:
    """Turn a list / numpy array / tensor of row indices or a bool mask into an int64 CPU index
    tensor with non-negative entries, checking bounds (index_select does not wrap negatives)."""
    if isinstance(index, torch.Tensor):
        arr = index.detach().cpu().numpy()
    else:
        arr = np.asarray(index)
    if arr.ndim != 1:
        raise IndexError(f"row index must be 1-D, got shape {tuple(arr.shape)}")
    if arr.dtype == np.bool_:
        if arr.shape[0] != num_rows:
            raise IndexError(f"bool mask has {arr.shape[0]} entries but the batch has {num_rows} rows")
        return torch.from_numpy(np.flatnonzero(arr))
    if arr.size == 0:
        return torch.empty(0, dtype=torch.int64)
    if not np.issubdtype(arr.dtype, np.integer):
        raise IndexError(f"row index must hold integers or bools, got dtype {arr.dtype}")
    arr = arr.astype(np.int64, copy=False)
    lo, hi = int(arr.min()), int(arr.max())
    if lo < -num_rows or hi >= num_rows:
        bad = lo if lo < -num_rows else hi
        raise IndexError(f"row index {bad} is out of range for a batch of {num_rows} rows")
    if lo < 0:
        arr = np.where(arr < 0, arr + num_rows, arr)
    return torch.from_numpy(np.ascontiguousarray(arr))


# Row copies (concat, index select, bool mask, repeat) are torch's own kernels. They run on this
# process's intra-op threads (torch.get_num_threads()), a number fixed when the process starts by the
# CPUs it was given (verl.utils.cpu_threads: a Ray worker uses the CPUs its resource request reserved,
# the driver, which only moves data between workers, one), never by how busy the machine looks at the
# moment. torch's cat / index_select are no slower than a numpy memcpy path at any batch size we use
# (benchmarks/bench_dataproto.py), so no second kernel is kept.


def _out_buffer(like: torch.Tensor, rows: int) -> torch.Tensor | None:
    """A huge-page-advised output buffer for a large CPU result (None: let torch allocate)."""
    if wants_fresh_buffer(like, rows * math.prod(like.shape[1:]) * like.element_size()):
        return empty_cpu((rows, *like.shape[1:]), like.dtype)
    return None


def _cat_rows(tensors: list[torch.Tensor], rows: int) -> torch.Tensor:
    """torch.cat(tensors, dim=0): always a fresh tensor (torch.cat copies even a single input)."""
    first = tensors[0]
    if all(t.dtype == first.dtype and t.device == first.device for t in tensors):
        out = _out_buffer(first, rows)
        if out is not None:
            return torch.cat(tensors, dim=0, out=out)
    return torch.cat(tensors, dim=0)


def _take_rows(t: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """torch.index_select(t, 0, index) as a fresh tensor (index: int64, non-negative, in range)."""
    if index.device != t.device:
        index = index.to(t.device)
    out = _out_buffer(t, index.shape[0])
    if out is not None:
        return torch.index_select(t, 0, index, out=out)
    return torch.index_select(t, 0, index)


def _rebuild_tensor_batch(batch_size: tuple, keys: list, specs: list, payloads: list) -> TensorBatch:
    tensors = {}
    for key, spec, payload in zip(keys, specs, payloads):
        if spec is None:  # tensor pickled by torch itself (grad, non-CPU, exotic dtype)
            tensors[key] = payload
            continue
        dtype, shape = spec
        numel = 1
        for s in shape:
            numel *= s
        if numel == 0:
            tensors[key] = torch.empty(shape, dtype=dtype)
            continue
        # Ray hands out-of-band buffers back read-only (they live in the object store); copy them
        # so the receiver gets ordinary writable tensors, as with upstream DataProto.
        view = memoryview(payload)
        if view.readonly:
            payload = bytearray(view)
        tensors[key] = torch.frombuffer(payload, dtype=dtype, count=numel).view(shape)
    return TensorBatch._trusted(tensors, torch.Size(batch_size))


class TensorBatch:
    """A dict of tensors whose first `len(batch_size)` dims equal `batch_size`.

    Keys index tensors (`tb["input_ids"]`); ints, slices, index lists/arrays/tensors and bool
    masks index rows along dim 0 and return a new TensorBatch (slices share memory).
    """

    __slots__ = ("_tensors", "_batch_size")

    def __init__(
        self, source: Mapping[str, torch.Tensor] | None = None, batch_size: Iterable[int] | None = None
    ):
        source = dict(source) if source is not None else {}
        if batch_size is None:
            if not source:
                raise ValueError("TensorBatch needs batch_size when it has no tensors to infer it from")
            batch_size = next(iter(source.values())).shape[:1]
        self._batch_size = torch.Size(batch_size)
        self._tensors: dict[str, torch.Tensor] = {}
        for key, value in source.items():
            self[key] = value

    @classmethod
    def _trusted(cls, tensors: dict[str, torch.Tensor], batch_size: torch.Size) -> TensorBatch:
        """Build without per-key checks, for results the caller derived from a checked batch."""
        out = cls.__new__(cls)
        out._tensors = tensors
        out._batch_size = batch_size
        return out

    # ----------------------------------------------------------------- mapping interface
    @property
    def batch_size(self) -> torch.Size:
        return self._batch_size

    @property
    def shape(self) -> torch.Size:
        return self._batch_size

    @property
    def batch_dims(self) -> int:
        return len(self._batch_size)

    @property
    def device(self) -> torch.device | None:
        """The device all tensors live on, or None when empty or mixed (as TensorDict)."""
        devices = {t.device for t in self._tensors.values()}
        return devices.pop() if len(devices) == 1 else None

    def keys(self):
        return self._tensors.keys()

    def values(self):
        return self._tensors.values()

    def items(self):
        return self._tensors.items()

    def __iter__(self) -> Iterator[str]:
        return iter(self._tensors)

    def __contains__(self, key: object) -> bool:
        return key in self._tensors

    def __len__(self) -> int:
        # TensorDict semantics: the number of rows, not the number of keys.
        return self._batch_size[0] if self._batch_size else 0

    def get(self, key: str, default: Any = None) -> Any:
        return self._tensors.get(key, default)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, str):
            try:
                return self._tensors[index]
            except KeyError:
                raise KeyError(f"key {index!r} not in batch; keys are {sorted(self._tensors)}") from None
        if isinstance(index, slice):
            return self._rows_slice(index)
        if isinstance(index, (int, np.integer)):
            n = len(self)
            i = int(index)
            if not -n <= i < n:
                raise IndexError(f"row {i} is out of range for a batch of {n} rows")
            return TensorBatch._trusted({k: t[i] for k, t in self._tensors.items()}, self._batch_size[1:])
        return self.index_rows(normalize_row_index(index, len(self)))

    def __setitem__(self, key: str, value: torch.Tensor) -> None:
        if not isinstance(key, str):
            raise TypeError(f"TensorBatch keys are strings, got {type(key).__name__} {key!r}")
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"batch[{key!r}] must be a torch.Tensor, got {type(value).__name__}")
        nb = len(self._batch_size)
        if value.shape[:nb] != self._batch_size:
            raise ValueError(
                f"batch[{key!r}] has shape {tuple(value.shape)} but the batch size is "
                f"{tuple(self._batch_size)}: its leading dims must match"
            )
        self._tensors[key] = value

    def __delitem__(self, key: str) -> None:
        del self._tensors[key]

    def _add_disjoint(self, other: TensorBatch) -> bool:
        """Add other's tensors in place, unchecked, if the two batches have the same batch size and
        no common key (other's tensors were checked against that size already); False otherwise,
        leaving self as it was."""
        if other._batch_size != self._batch_size or not self._tensors.keys().isdisjoint(other._tensors):
            return False
        self._tensors.update(other._tensors)
        return True

    def set(self, key: str, value: torch.Tensor) -> TensorBatch:
        self[key] = value
        return self

    def update(self, other: Mapping[str, torch.Tensor]) -> TensorBatch:
        for key, value in other.items():
            self[key] = value
        return self

    def pop(self, key: str, *default: Any) -> Any:
        if key not in self._tensors and not default:
            raise KeyError(f"key {key!r} not in batch; keys are {sorted(self._tensors)}")
        return self._tensors.pop(key, *default)

    def select(self, *keys: str, strict: bool = True) -> TensorBatch:
        if strict:
            missing = [k for k in keys if k not in self._tensors]
            if missing:
                raise KeyError(f"keys {missing} not in batch; keys are {sorted(self._tensors)}")
        return TensorBatch._trusted(
            {k: self._tensors[k] for k in keys if k in self._tensors}, self._batch_size
        )

    def exclude(self, *keys: str) -> TensorBatch:
        drop = set(keys)
        return TensorBatch._trusted(
            {k: t for k, t in self._tensors.items() if k not in drop}, self._batch_size
        )

    def rename_key_(self, old_keys: str | tuple, new_keys: str | tuple) -> TensorBatch:
        old_keys = (old_keys,) if isinstance(old_keys, str) else tuple(old_keys)
        new_keys = (new_keys,) if isinstance(new_keys, str) else tuple(new_keys)
        if len(old_keys) != len(new_keys):
            raise ValueError(f"rename needs as many new keys as old: {old_keys} -> {new_keys}")
        for old in old_keys:
            if old not in self._tensors:
                raise KeyError(f"cannot rename {old!r}: not in batch; keys are {sorted(self._tensors)}")
        moved = {old: self._tensors.pop(old) for old in old_keys}
        for old, new in zip(old_keys, new_keys):
            self._tensors[new] = moved[old]
        return self

    def to_dict(self) -> dict[str, torch.Tensor]:
        return dict(self._tensors)

    def is_empty(self) -> bool:
        return not self._tensors

    # ----------------------------------------------------------------- whole-batch ops
    def apply(self, fn, batch_size: Iterable[int] | None = None) -> TensorBatch:
        out = {k: fn(t) for k, t in self._tensors.items()}
        return TensorBatch._trusted(out, self._batch_size if batch_size is None else torch.Size(batch_size))

    def to(self, device: str | torch.device, non_blocking: bool = False) -> TensorBatch:
        """This batch itself when every tensor is already on `device` (as TensorDict), else a moved copy."""
        if device == "cpu" or (isinstance(device, torch.device) and device == _CPU):
            # the common no-op case (`data.to("cpu")` on CPU data); Tensor.is_cpu is much cheaper
            # than building a torch.device per tensor
            for t in self._tensors.values():
                if not t.is_cpu:
                    break
            else:
                return self
        target = torch.device(device)
        if all(t.device == target for t in self._tensors.values()):
            return self
        return self.apply(lambda t: t.to(target, non_blocking=non_blocking))

    def cpu(self) -> TensorBatch:
        return self.to("cpu")

    def clone(self) -> TensorBatch:
        return self.apply(torch.clone)

    def contiguous(self) -> TensorBatch:
        return self.apply(lambda t: t.contiguous())

    def __copy__(self) -> TensorBatch:
        return TensorBatch._trusted(dict(self._tensors), self._batch_size)

    def __deepcopy__(self, memo: dict) -> TensorBatch:
        return self.clone()

    def numel(self) -> int:
        n = 1
        for s in self._batch_size:
            n *= s
        return n

    # ----------------------------------------------------------------- rows
    def _rows_slice(self, sl: slice) -> TensorBatch:
        out = {k: t[sl] for k, t in self._tensors.items()}
        n = len(range(*sl.indices(len(self))))
        return TensorBatch._trusted(out, torch.Size((n, *self._batch_size[1:])))

    def index_rows(self, index: torch.Tensor) -> TensorBatch:
        """Rows `index` (int64, non-negative, in range) of every tensor, as new tensors."""
        out = {k: _take_rows(t, index) for k, t in self._tensors.items()}
        return TensorBatch._trusted(out, torch.Size((index.shape[0], *self._batch_size[1:])))

    def split(self, sizes: int | list[int], dim: int = 0) -> list[TensorBatch]:
        if dim != 0:
            raise ValueError("TensorBatch splits along dim 0 only")
        n = len(self)
        if isinstance(sizes, int):
            sizes = [min(sizes, n - s) for s in range(0, n, sizes)] if sizes > 0 else []
        bounds = np.cumsum([0, *sizes]).tolist()
        if bounds[-1] != n:
            raise ValueError(f"split sizes {list(sizes)} add up to {bounds[-1]}, batch has {n} rows")
        return [self._rows_slice(slice(a, b)) for a, b in zip(bounds[:-1], bounds[1:])]

    def chunk(self, chunks: int, dim: int = 0) -> list[TensorBatch]:
        """torch.chunk semantics: pieces of ceil(n / chunks) rows (so possibly fewer pieces)."""
        n = len(self)
        step = -(-n // chunks) if n else 0
        if step == 0:
            return [self._rows_slice(slice(0, 0))]
        return self.split(step)

    @staticmethod
    def cat(batches: list[TensorBatch], dim: int = 0) -> TensorBatch:
        if dim != 0:
            raise ValueError("TensorBatch concatenates along dim 0 only")
        if not batches:
            raise ValueError("cannot concatenate an empty list of TensorBatch")
        first = batches[0]
        keys = list(first.keys())
        for i, b in enumerate(batches[1:], 1):
            if b.keys() != first.keys():
                raise KeyError(f"batch {i} has keys {sorted(b.keys())}, batch 0 has {sorted(keys)}")
            if b.batch_size[1:] != first.batch_size[1:]:
                raise ValueError(
                    f"batch {i} has batch size {tuple(b.batch_size)}, batch 0 {tuple(first.batch_size)}"
                )
        rows = sum(b.batch_size[0] for b in batches)
        out = {k: _cat_rows([b._tensors[k] for b in batches], rows) for k in keys}
        return TensorBatch._trusted(out, torch.Size((rows, *first.batch_size[1:])))

    @staticmethod
    def stack(batches: list[TensorBatch], dim: int = 0) -> TensorBatch:
        if dim != 0:
            raise ValueError("TensorBatch stacks along dim 0 only")
        if not batches:
            raise ValueError("cannot stack an empty list of TensorBatch")
        keys = list(batches[0].keys())
        out = {k: torch.stack([b._tensors[k] for b in batches], dim=0) for k in keys}
        return TensorBatch._trusted(out, torch.Size((len(batches), *batches[0].batch_size)))

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        # Lets upstream-style code call torch.cat / torch.stack on a list of batches.
        kwargs = kwargs or {}
        if func is torch.cat or func is torch.concat:
            return TensorBatch.cat(*args, **kwargs)
        if func is torch.stack:
            return TensorBatch.stack(*args, **kwargs)
        return NotImplemented

    # ----------------------------------------------------------------- comparisons / repr
    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TensorBatch):
            return NotImplemented
        return (
            self._batch_size == other._batch_size
            and self._tensors.keys() == other._tensors.keys()
            and all(torch.equal(t, other._tensors[k]) for k, t in self._tensors.items())
        )

    __hash__ = None  # mutable mapping

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}: {tuple(t.shape)} {t.dtype}" for k, t in self._tensors.items())
        return f"TensorBatch(batch_size={tuple(self._batch_size)}, {{{fields}}})"

    # ----------------------------------------------------------------- pickling
    def __reduce_ex__(self, protocol: int):
        keys, specs, payloads = [], [], []
        for key, t in self._tensors.items():
            keys.append(key)
            if t.device.type != "cpu" or t.requires_grad or t.is_sparse or t.is_quantized:
                specs.append(None)
                payloads.append(t)
                continue
            flat = t.contiguous().reshape(-1).view(torch.uint8).numpy()
            specs.append((t.dtype, tuple(t.shape)))
            # Protocol 5 writes the tensor memory straight into the stream (or out of band for
            # Ray); older protocols need a bytes copy.
            payloads.append(pickle.PickleBuffer(flat) if protocol >= 5 else flat.tobytes())
        return _rebuild_tensor_batch, (tuple(self._batch_size), keys, specs, payloads)
