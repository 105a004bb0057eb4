"""Tensors through Ray's object store with the verl tensor transport: exact, writable, private."""


import pytest
import torch

ray = pytest.importorskip("ray")

from verl.utils.ray_transport import install_tensor_transport  # noqa: E402


def test_tensor_round_trip_is_exact_and_private(ray_cluster):
    install_tensor_transport()
    big = torch.arange(4000 * 64, dtype=torch.float32).view(4000, 64)
    cases = {
        "float32 rows of a larger storage": big[10:20],
        "bfloat16": torch.linspace(-3, 3, 4096).to(torch.bfloat16).view(64, 64),
        "bool": torch.arange(100) % 3 == 0,
        "non-contiguous": big.t()[:, :5],
        "empty": torch.zeros(0, 7, dtype=torch.int64),
        "scalar": torch.tensor(3.5, dtype=torch.float64),
    }
    for name, t in cases.items():
        ref = ray.put(t)
        got = ray.get(ref)
        assert got.dtype == t.dtype and got.shape == t.shape, name
        assert torch.equal(got, t), name
        if got.numel():
            got.view(-1)[0] = 1  # writable, and the stored object is not changed by it
            again = ray.get(ref)
            assert torch.equal(again, t), name
    grad = torch.ones(3, requires_grad=True)
    assert ray.get(ray.put(grad)).requires_grad


def test_a_row_slice_ships_only_its_rows(ray_cluster):
    install_tensor_transport()
    big = torch.zeros(4000, 64)  # 1 MB storage; the slice below is 10 rows = 2560 bytes
    context = ray._private.worker.global_worker.get_serialization_context()
    assert context.serialize(big[10:20]).total_bytes < 8_000
