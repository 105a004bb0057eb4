"""Parts of `verl.protocol` that do not need the DataProto class: the global `DataProtoConfig`
switch, `DataProtoItem` (one row), the consistency check, the mini-batch iterator and the row
helpers DataProto's methods call. Import them from `verl.protocol`; this module is an implementation
detail that keeps protocol.py small.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from verl.utils.batch_merge import DataProtoCheckError, DataProtoTypeError
from verl.utils.hugepage_alloc import empty_cpu, wants_fresh_buffer
from verl.utils.tensor_batch import TensorBatch

if TYPE_CHECKING:
    from verl.protocol import DataProto

__all__ = ["DataProtoConfig", "DataProtoItem"]


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


@dataclass
class DataProtoItem:
    """One row of a DataProto: `batch` is a TensorBatch with batch_size ()."""

    batch: TensorBatch | None = None
    non_tensor_batch: dict = field(default_factory=dict)
    meta_info: dict = field(default_factory=dict)


def check_consistency(data: DataProto) -> None:
    """Raise if any tensor or array of `data` (a DataProto) disagrees with the batch's row count,
    or has the wrong type."""
    if data.batch is not None and len(data.batch.batch_size) != 1 and data.non_tensor_batch:
        raise DataProtoCheckError(
            f"a batch with non_tensor_batch must have one batch dim, got batch size {tuple(data.batch.batch_size)}"
        )
    if not isinstance(data.non_tensor_batch, dict):
        raise DataProtoTypeError(f"non_tensor_batch must be a dict, got {type(data.non_tensor_batch).__name__}")
    if not isinstance(data.meta_info, dict):
        raise DataProtoTypeError(f"meta_info must be a dict, got {type(data.meta_info).__name__}")
    n = pivot = None
    if data.batch is not None:
        n, pivot = data.batch.batch_size[0] if data.batch.batch_size else None, "batch"
    for key, val in data.non_tensor_batch.items():
        if not isinstance(val, np.ndarray):
            raise DataProtoTypeError(
                f"non_tensor_batch[{key!r}] must be a numpy array (dtype=object), got {type(val).__name__}"
            )
        if val.ndim == 0:
            raise DataProtoCheckError(f"non_tensor_batch[{key!r}] is a 0-d array; it needs one entry per row")
        if n is None:
            n, pivot = val.shape[0], f"non_tensor_batch[{key!r}]"
        elif val.shape[0] != n:
            raise DataProtoCheckError(f"non_tensor_batch[{key!r}] has {val.shape[0]} rows but {pivot} has {n}")


def make_row_iterator(
    data: DataProto, mini_batch_size: int, epochs: int, seed: int | None, dataloader_kwargs: dict | None
) -> Iterator[DataProto]:
    """DataProto.make_iterator: mini-batches of `data` through a torch DataLoader."""
    if len(data) % mini_batch_size:
        raise DataProtoCheckError(
            f"make_iterator: {len(data)} rows do not divide into mini-batches of {mini_batch_size}"
        )
    dataloader_kwargs = dict(dataloader_kwargs or {})
    if "collate_fn" in dataloader_kwargs:
        raise DataProtoCheckError(
            "make_iterator: collate_fn is set by DataProto and cannot be passed in dataloader_kwargs"
        )
    generator = torch.Generator().manual_seed(seed) if seed is not None else None
    from torch.utils.data import DataLoader

    loader: DataLoader[Any] = DataLoader(
        dataset=_RowDataset(data),
        batch_size=mini_batch_size,
        collate_fn=_identity_collate,
        generator=generator,
        **dataloader_kwargs,
    )
    meta_info = data.meta_info

    def batches():
        for _ in range(epochs):
            for mini_batch in loader:
                mini_batch.meta_info = meta_info
                yield mini_batch

    return batches()


class _RowDataset(torch.utils.data.Dataset):
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


def _identity_collate(batch: Any) -> Any:
    # __getitems__ already returns the mini-batch as one DataProto
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
