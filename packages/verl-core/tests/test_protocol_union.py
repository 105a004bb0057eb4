"""DataProto.union: disjoint batches merge in place without re-checking; overlaps and size
mismatches still go through the checked merge."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from verl import DataProto


def _proto(rows: int, **tensors: torch.Tensor) -> DataProto:
    return DataProto.from_dict(
        tensors=tensors, non_tensors={"uid": np.array([f"u{i}" for i in range(rows)], dtype=object)}
    )


def test_disjoint_union_adds_in_place():
    a = _proto(3, x=torch.arange(3))
    b = DataProto.from_dict(tensors={"y": torch.ones(3, 2)}, meta_info={"step": 4})
    batch_before = a.batch
    out = a.union(b)
    assert out is a and a.batch is batch_before
    assert list(a.batch.keys()) == ["x", "y"] and a.batch["y"] is b.batch["y"]
    assert list(b.batch.keys()) == ["y"]  # other is untouched
    assert a.meta_info == {"step": 4}


def test_union_with_equal_shared_key_keeps_it():
    x = torch.arange(4)
    a = _proto(4, x=x)
    b = DataProto.from_dict(tensors={"x": x.clone(), "z": torch.zeros(4)})
    a.union(b)
    assert list(a.batch.keys()) == ["x", "z"] and torch.equal(a.batch["x"], x)


def test_union_with_different_shared_key_raises():
    a = _proto(2, x=torch.tensor([1, 2]))
    b = DataProto.from_dict(tensors={"x": torch.tensor([1, 3])})
    with pytest.raises(ValueError, match="'x'"):
        a.union(b)


def test_union_size_mismatch_raises_and_leaves_self_alone():
    a = DataProto.from_dict(tensors={"x": torch.zeros(2, 3)}, num_batch_dims=2)
    b = DataProto.from_dict(tensors={"y": torch.zeros(2, 4)}, num_batch_dims=2)
    with pytest.raises(ValueError):
        a.union(b)
    assert list(a.batch.keys()) == ["x"]


def _self_referencing(tag: str) -> np.ndarray:
    arr = np.empty(2, dtype=object)
    arr[0] = arr  # the array holds itself
    arr[1] = tag
    return arr


def test_union_numpy_dict_terminates_on_self_referencing_object_arrays():
    """Regression: comparing two distinct self-referencing arrays recursed until RecursionError."""
    from verl.protocol import union_numpy_dict

    a, b = _self_referencing("x"), _self_referencing("x")
    merged = union_numpy_dict({"k": a}, {"k": b})  # same structure, same leaf: equal
    assert merged["k"] is b
    with pytest.raises(ValueError, match="'k' holds different values"):
        union_numpy_dict({"k": a}, {"k": _self_referencing("y")})
    # the same through DataProto.union, and for a cycle through two arrays and through a list
    p, q = DataProto(non_tensor_batch={"k": a}), DataProto(non_tensor_batch={"k": b})
    assert p.union(q).non_tensor_batch["k"] is b
    m, n = np.empty(1, dtype=object), np.empty(1, dtype=object)
    m[0], n[0] = n, m
    union_numpy_dict({"k": m}, {"k": n})
    l1, l2 = [1], [1]
    l1.append(l1)
    l2.append(l2)
    x, y = np.empty(1, dtype=object), np.empty(1, dtype=object)
    x[0], y[0] = l1, l2
    union_numpy_dict({"k": x}, {"k": y})
    l2[0] = 2
    with pytest.raises(ValueError, match="different values"):
        union_numpy_dict({"k": x}, {"k": y})
