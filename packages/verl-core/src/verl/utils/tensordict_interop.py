"""Conversion between DataProto and `tensordict.TensorDict` (the optional `tensordict` extra).

The tensordict library is imported only here and only when a conversion is asked for, so
`import verl` and `from verl import DataProto` never load it.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

_INSTALL_HINT = (
    "DataProto.from_tensordict/to_tensordict need the tensordict package: pip install verl-core[tensordict]"
)


def _tensordict_module():
    try:
        import tensordict
    except ImportError as e:
        raise ImportError(_INSTALL_HINT) from e
    return tensordict


def is_tensordict(obj: Any) -> bool:
    """True if obj is a tensordict.TensorDict (checked without importing tensordict)."""
    module = sys.modules.get("tensordict")
    return module is not None and isinstance(obj, module.TensorDictBase)


def dataproto_from_tensordict(cls, tensor_dict: Any, meta_info: dict | None, num_batch_dims: int):
    td = _tensordict_module()
    import torch

    if not isinstance(tensor_dict, td.TensorDictBase):
        raise TypeError(f"from_tensordict expects a tensordict.TensorDict, got {type(tensor_dict).__name__}")
    meta_info = dict(meta_info or {})
    tensors: dict = {}
    non_tensors: dict = {}
    for key in tensor_dict.keys():
        # NonTensorStack / NonTensorData must be read before `tensor_dict[key]` unwraps them.
        value = tensor_dict.get(key)
        if isinstance(value, td.NonTensorStack):
            items = value.tolist()
            arr = np.empty(len(items), dtype=object)
            for i, item in enumerate(items):
                arr[i] = item
            non_tensors[key] = arr
        elif isinstance(value, td.NonTensorData):
            meta_info[key] = value.data
        elif isinstance(value, torch.Tensor):
            tensors[key] = value
        else:
            raise TypeError(
                f"from_tensordict: entry {key!r} is a {type(value).__name__}; nested TensorDicts are not supported"
            )
    return cls.from_dict(
        tensors=tensors, non_tensors=non_tensors, meta_info=meta_info, num_batch_dims=num_batch_dims
    )


def dataproto_to_tensordict(data) -> Any:
    td = _tensordict_module()

    tensors = data.batch.to_dict() if data.batch is not None else {}
    clash = sorted(set(tensors) & set(data.non_tensor_batch))
    if clash:
        raise ValueError(f"to_tensordict: keys {clash} are in both batch and non_tensor_batch")
    out = td.TensorDict(tensors, batch_size=[len(data)])
    for key, arr in data.non_tensor_batch.items():
        out.set(key, td.NonTensorStack.from_list(list(arr)))
    for key, value in data.meta_info.items():
        if key in out.keys():
            raise ValueError(f"to_tensordict: meta_info key {key!r} clashes with a batch key")
        out.set_non_tensor(key, value)
    return out
