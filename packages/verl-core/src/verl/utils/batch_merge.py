"""Value equality and dict merging used when DataProto batches are joined (union, concat).

Equality here must cope with what lands in `non_tensor_batch` and `meta_info`: tensors, numpy
arrays (numeric with NaN, or object arrays of dicts/strings), and plain Python values.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from verl.utils.tensor_batch import TensorBatch


class DataProtoCheckError(ValueError, AssertionError):
    """A DataProto consistency check failed (row counts, batch sizes, conflicting values on a merge).

    A ValueError, and an AssertionError: upstream's DataProto runs the same checks as asserts, and code
    written for it catches AssertionError."""


class DataProtoTypeError(TypeError, AssertionError):
    """A DataProto field of the wrong type (a TypeError, and an AssertionError as upstream's asserts)."""

__all__ = [
    "DataProtoCheckError",
    "DataProtoTypeError",
    "values_equal",
    "union_two_dict",
    "union_tensor_dict",
    "union_numpy_dict",
    "list_of_dict_to_dict_of_list",
    "merge_meta_info",
    "as_object_array",
    "type_info",
]


def values_equal(a: Any, b: Any) -> bool:
    """True when `a` and `b` hold the same value; NaN equals NaN (as pandas' `equals` does).

    Containers that contain themselves (an object array holding itself, a list appending itself)
    compare structurally: a pair already being compared further up is taken as equal, so the
    comparison ends instead of recursing forever.
    """
    return _values_equal(a, b, set())


def _values_equal(a: Any, b: Any, active: set[tuple[int, int]]) -> bool:
    if a is b:
        return True
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            return False
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        if a.dtype.is_floating_point or a.dtype.is_complex:
            return bool(torch.equal(a, b) or torch.allclose(a, b, rtol=0, atol=0, equal_nan=True))
        return bool(torch.equal(a, b))
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)) or a.shape != b.shape:
            return False
        if a.dtype == object or b.dtype == object:
            return _equal_members(a, b, zip(a.ravel(), b.ravel()), active)
        if np.issubdtype(a.dtype, np.floating) or np.issubdtype(a.dtype, np.complexfloating):
            return bool(np.array_equal(a, b, equal_nan=True))
        return bool(np.array_equal(a, b))
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and _equal_members(a, b, ((v, b[k]) for k, v in a.items()), active)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and _equal_members(a, b, zip(a, b), active)
    try:
        return bool(a == b)
    except (TypeError, ValueError):  # objects whose == is elementwise or undefined
        return False


def _equal_members(a: Any, b: Any, pairs: Any, active: set[tuple[int, int]]) -> bool:
    """Compare the members of containers `a` and `b`; `active` holds the pairs being compared above."""
    key = (id(a), id(b))
    if key in active:
        return True  # a cycle: equal unless some other member differs
    active.add(key)
    try:
        return all(_values_equal(x, y, active) for x, y in pairs)
    finally:
        active.discard(key)


def union_two_dict(dict1: dict, dict2: dict) -> dict:
    """Add dict2's entries to dict1 (in place, returned); a key in both must hold equal values."""
    for key, value in dict2.items():
        if key in dict1 and not values_equal(dict1[key], value):
            raise DataProtoCheckError(
                f"union: key {key!r} has different values on the two sides: {dict1[key]!r} vs {value!r}"
            )
        dict1[key] = value
    return dict1


def list_of_dict_to_dict_of_list(list_of_dict: list[dict]) -> dict[str, list]:
    """[{a: 1, b: 2}, {a: 3, b: 4}] -> {a: [1, 3], b: [2, 4]}; every dict must have the same keys."""
    if not list_of_dict:
        return {}
    keys = list(list_of_dict[0].keys())
    output: dict[str, list] = {key: [] for key in keys}
    for i, item in enumerate(list_of_dict):
        if item.keys() != output.keys():
            raise KeyError(f"dict {i} has keys {sorted(item)} but dict 0 has {sorted(keys)}; all must match")
        for key, value in item.items():
            output[key].append(value)
    return output


def union_tensor_dict(tensor_dict1: TensorBatch, tensor_dict2: TensorBatch) -> TensorBatch:
    """Add tensor_dict2's tensors to tensor_dict1 (in place); shared keys must hold equal tensors."""
    if tensor_dict1.batch_size != tensor_dict2.batch_size:
        raise DataProtoCheckError(
            f"union: the batches have different sizes {tuple(tensor_dict1.batch_size)} and "
            f"{tuple(tensor_dict2.batch_size)}"
        )
    for key, value in tensor_dict2.items():
        mine = tensor_dict1.get(key)
        if mine is None:
            tensor_dict1[key] = value
        elif mine is not value and not values_equal(mine, value):
            raise DataProtoCheckError(f"union: batch key {key!r} holds different tensors on the two sides")
    return tensor_dict1


def union_numpy_dict(tensor_dict1: dict[str, np.ndarray], tensor_dict2: dict[str, np.ndarray]) -> dict:
    """Add tensor_dict2's arrays to tensor_dict1 (in place); shared keys must hold equal arrays."""
    for key, value in tensor_dict2.items():
        if not isinstance(value, np.ndarray):
            raise DataProtoTypeError(
                f"union: non_tensor_batch[{key!r}] must be a numpy array, got {type(value).__name__}"
            )
        mine = tensor_dict1.get(key)
        if mine is not None and mine is not value and not values_equal(mine, value):
            raise DataProtoCheckError(f"union: non_tensor_batch key {key!r} holds different values on the two sides")
        tensor_dict1[key] = value
    return tensor_dict1


def as_object_array(key: str, value: Any) -> np.ndarray:
    if isinstance(value, np.ndarray):
        return value
    if isinstance(value, (list, tuple)):
        # Fill element by element: np.array(list_of_lists, dtype=object) would make a 2-D array.
        arr = np.empty(len(value), dtype=object)
        for i, v in enumerate(value):
            arr[i] = v
        return arr
    raise DataProtoTypeError(f"non_tensor_batch[{key!r}] must be a numpy array or a list, got {type(value).__name__}")


def merge_meta_info(metas: list[dict]) -> dict:
    """concat's meta_info rule: equal values kept once, `metrics` gathered into lists, conflicts fail."""
    merged: dict = {}
    origin: dict = {}
    gathered: list[dict] = []
    for i, meta in enumerate(metas):
        for key, value in meta.items():
            if key == "metrics":
                if value is None:
                    continue
                gathered.extend(value if isinstance(value, list) else [value])
            elif key in merged:
                if not values_equal(merged[key], value):
                    raise DataProtoCheckError(
                        f"DataProto.concat: meta_info key {key!r} differs between batches: "
                        f"{merged[key]!r} (batch {origin[key]}) vs {value!r} (batch {i})"
                    )
            else:
                merged[key] = value
                origin[key] = i
    if gathered:
        metrics: dict[str, list] = {}
        for m in gathered:  # ranks may report different metric names, so take the union
            for name, value in m.items():
                metrics.setdefault(name, []).append(value)
        merged["metrics"] = metrics
    return merged


def type_info(value: Any) -> str:
    """Type description that looks inside containers, e.g. `dict[str: list[float]]`."""
    if isinstance(value, list):
        inner = sorted({type_info(v) for v in value[:3]})
        return f"list[{'|'.join(inner) if inner else '...'}]"
    if isinstance(value, tuple):
        return f"tuple({', '.join(type_info(v) for v in value)})"
    if isinstance(value, dict):
        if not value:
            return "dict"
        k, v = next(iter(value.items()))
        return f"dict[{type_info(k)}: {type_info(v)}]"
    if isinstance(value, np.ndarray):
        return f"ndarray{value.shape} ({value.dtype})"
    return type(value).__name__
