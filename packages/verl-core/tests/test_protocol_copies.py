"""Row copies (concat, index select, bool mask) must equal the rows they name.

Row copies are torch's kernels on this process's intra-op threads: one thread runs torch's serial
copy, more run its parallel one. Every test here runs under both (the `torch_threads` fixture sets 1
or 2 threads and lowers the huge-page buffer threshold so the `out=` path runs too), compares over
dtypes, row shapes and index kinds with the expected bytes computed by numpy on byte views of the
inputs (an independent derivation, not torch's own ops), and checks the outputs are fresh memory, so
a later in-place write cannot leak between DataProtos.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from verl import DataProto
from verl.utils import hugepage_alloc
from verl.utils.tensor_batch import TensorBatch


@pytest.fixture(
    autouse=True, params=[(1, False), (2, False), (2, True)], ids=["serial", "parallel", "parallel-out"]
)
def torch_threads(request, monkeypatch):
    """Run with 1 or 2 torch threads; "-out": every output goes through the huge-page out= buffer."""
    threads, out_buffer = request.param
    if out_buffer:
        monkeypatch.setattr(hugepage_alloc, "MIN_BYTES", 1)
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    yield threads
    torch.set_num_threads(previous)


def _bytes(t: torch.Tensor) -> np.ndarray:
    """t's rows as a (rows, bytes per row) uint8 numpy array (works for dtypes numpy lacks)."""
    flat = t.detach().contiguous().view(torch.uint8) if t.dim() else t.detach().reshape(1).view(torch.uint8)
    return flat.reshape(t.shape[0], -1).numpy().copy()


DTYPES = [
    torch.bool,
    torch.uint8,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
    torch.complex64,
]


def _random(shape: tuple[int, ...], dtype: torch.dtype, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    if dtype.is_complex or dtype.is_floating_point:
        return torch.randn(shape, generator=g).to(dtype)
    return torch.randint(0, 100, shape, generator=g).to(dtype)


def _batch(rows: int, seed: int = 0) -> DataProto:
    tensors = {f"t_{str(dt).split('.')[-1]}": _random((rows, 5), dt, seed + i) for i, dt in enumerate(DTYPES)}
    tensors["one_dim"] = torch.arange(rows, dtype=torch.int64) * 7
    tensors["three_dim"] = _random((rows, 2, 3), torch.float32, seed + 99)
    uid = np.array([f"u{seed}-{i}" for i in range(rows)], dtype=object)
    return DataProto.from_dict(tensors=tensors, non_tensors={"uid": uid})


def _assert_fresh(out: torch.Tensor, sources: list[torch.Tensor]) -> None:
    ptr = out.untyped_storage().data_ptr()
    assert all(ptr != s.untyped_storage().data_ptr() for s in sources)


@pytest.mark.parametrize("index_kind", ["numpy", "list", "tensor", "negative", "bool"])
def test_index_select_equals_torch_index_select(index_kind):
    data = _batch(37)
    rng = np.random.default_rng(1)
    positions = rng.choice(37, size=23, replace=True)  # repeats allowed, order arbitrary
    if index_kind == "numpy":
        index, expected_rows = positions, positions
    elif index_kind == "list":
        index, expected_rows = positions.tolist(), positions
    elif index_kind == "tensor":
        index, expected_rows = torch.from_numpy(positions).to(torch.int32), positions
    elif index_kind == "negative":
        index, expected_rows = positions - 37, positions
    else:
        index = rng.random(37) > 0.4
        expected_rows = np.flatnonzero(index)
    out = data[index]
    for key, src in data.batch.items():
        got = out.batch[key]
        assert got.dtype == src.dtype and got.shape == (len(expected_rows), *src.shape[1:])
        assert np.array_equal(_bytes(got), np.take(_bytes(src), expected_rows, axis=0)), key
        _assert_fresh(out.batch[key], [src])
    assert out.non_tensor_batch["uid"].tolist() == [f"u0-{i}" for i in expected_rows]
    # writing into the result leaves the source alone
    before = data.batch["t_int64"].clone()
    out.batch["t_int64"].fill_(-1)
    assert torch.equal(data.batch["t_int64"], before)


def test_concat_equals_torch_cat():
    parts = [_batch(n, seed=s) for s, n in enumerate([3, 1, 8, 5])]
    out = DataProto.concat(parts)
    assert len(out) == 17
    for key in parts[0].batch.keys():
        expected = np.concatenate([_bytes(p.batch[key]) for p in parts], axis=0)
        assert out.batch[key].dtype == parts[0].batch[key].dtype, key
        assert np.array_equal(_bytes(out.batch[key]), expected), key
        _assert_fresh(out.batch[key], [p.batch[key] for p in parts])
    assert out.non_tensor_batch["uid"].tolist() == sum(
        (p.non_tensor_batch["uid"].tolist() for p in parts), []
    )


def test_concat_of_chunks_is_an_independent_copy():
    data = _batch(16)
    out = DataProto.concat(data.chunk(4))
    for key, src in data.batch.items():
        assert torch.equal(out.batch[key], src)
        _assert_fresh(out.batch[key], [src])
    out.batch["t_float32"].add_(1.0)
    assert torch.equal(out.batch["t_float32"], data.batch["t_float32"] + 1.0)


def test_concat_with_empty_and_non_contiguous_parts():
    a = _batch(4)
    empty = a.slice(0, 0)
    strided = a.slice(0, 4, 2)  # every other row: not contiguous
    out = DataProto.concat([a, empty, strided])
    for key, src in a.batch.items():
        assert torch.equal(out.batch[key], torch.cat([src, src[0:0], src[0:4:2]])), key


def test_concat_mixed_dtypes_follows_torch_cat_promotion():
    a = TensorBatch({"x": torch.tensor([[1, 2]], dtype=torch.int32)})
    b = TensorBatch({"x": torch.tensor([[3.5, 4.5]], dtype=torch.float64)})
    out = TensorBatch.cat([a, b])
    expected = torch.cat([a["x"], b["x"]])
    assert out["x"].dtype == expected.dtype and torch.equal(out["x"], expected)


def test_concat_rejects_mismatched_row_shapes_like_torch():
    # (2, 4) and (8,) rows have the same byte size; the byte copy must not glue them together
    a = TensorBatch({"x": torch.zeros(1, 2, 4)})
    b = TensorBatch({"x": torch.zeros(1, 8)})
    with pytest.raises(RuntimeError):
        TensorBatch.cat([a, b])


def test_grad_tensors_keep_autograd():
    w = torch.randn(6, 3, requires_grad=True)
    tb = TensorBatch({"w": w})
    picked = tb[torch.tensor([4, 0, 4])]
    joined = TensorBatch.cat([tb, tb])
    (picked["w"].sum() + joined["w"].sum()).backward()
    expected = torch.full((6, 3), 2.0)
    expected[4] += 2.0
    expected[0] += 1.0
    assert torch.equal(w.grad, expected)


@pytest.mark.parametrize("device", ["cpu", torch.device("cpu")])
def test_to_cpu_on_cpu_data_keeps_the_same_tensors(device):
    data = _batch(4)
    before = {k: t for k, t in data.batch.items()}
    assert data.to(device) is data
    assert all(data.batch[k] is t for k, t in before.items())


def test_to_another_device_moves_every_tensor():
    data = _batch(4)
    moved = data.batch.to("meta")
    assert {t.device.type for t in moved.values()} == {"meta"}
    assert moved.to("meta") is moved
    assert [t.shape for t in moved.values()] == [t.shape for t in data.batch.values()]
