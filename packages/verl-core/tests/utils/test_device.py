"""verl.utils.device: the device as a value (names, backends, the CUDA index under Ray and torchrun,
the device a collective needs); the CUDA-only line is the gpu-marked test at the end."""

import pytest
import torch
from verl.utils.device import (
    collective_device,
    get_nccl_backend,
    get_torch_device,
    local_device_index,
    resolve_device_name,
    seed_everything,
    set_worker_device,
)


def test_names_and_backends():
    assert resolve_device_name("cpu") == "cpu" and resolve_device_name("cuda") == "cuda"
    assert resolve_device_name("auto") == ("cuda" if torch.cuda.is_available() else "cpu")
    assert get_nccl_backend("cpu") == "gloo" and get_nccl_backend("cuda") == "nccl"
    assert get_torch_device("cpu") is torch.cpu and get_torch_device("cuda") is torch.cuda
    with pytest.raises(ValueError, match="unknown device 'tpu'; known: auto, cpu, cuda"):
        resolve_device_name("tpu")
    assert set_worker_device("cpu") == torch.device("cpu")


def test_cuda_index_under_ray_is_the_assigned_gpu_not_local_rank():
    # Ray's one-GPU-per-actor: CUDA_VISIBLE_DEVICES holds only the assigned GPU, whatever LOCAL_RANK is
    assert local_device_index(local_rank=3, device_count=1, visible_devices="5", assigned=["5"]) == 0
    # several visible (RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES): the assigned id's position among them
    assert local_device_index(local_rank=0, device_count=4, visible_devices="4,5,6,7", assigned=["6"]) == 2
    assert local_device_index(local_rank=0, device_count=8, visible_devices=None, assigned=["6"]) == 6
    with pytest.raises(RuntimeError, match="Ray assigned GPU 3 .* does not list it"):
        local_device_index(local_rank=0, device_count=2, visible_devices="0,1", assigned=["3"])


def test_cuda_index_without_ray_is_local_rank():
    assert local_device_index(local_rank=2, device_count=4) == 2
    assert local_device_index(local_rank=5, device_count=1) == 0  # one visible device: it is ours
    with pytest.raises(RuntimeError, match="LOCAL_RANK=5 but this node shows 4 CUDA devices"):
        local_device_index(local_rank=5, device_count=4)
    with pytest.raises(RuntimeError, match="no CUDA device is visible"):
        local_device_index(local_rank=0, device_count=0)


def test_collective_device_follows_the_group_backend(tmp_path):
    import torch.distributed as dist

    started = not dist.is_initialized()
    if started:
        dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        assert collective_device() == torch.device("cpu")
        flag = torch.tensor([1], device=collective_device())
        dist.all_reduce(flag)  # the tensor the helper placed goes through the group's backend
        assert int(flag) == 1
    finally:
        if started:
            dist.destroy_process_group()


def test_seed_everything_seeds_python_numpy_torch():
    import random

    import numpy as np

    seed_everything(7)
    first = (random.random(), float(np.random.rand()), float(torch.rand(1)))
    seed_everything(7)
    assert (random.random(), float(np.random.rand()), float(torch.rand(1))) == first


@pytest.mark.gpu
def test_set_worker_device_selects_the_cuda_device():
    """GPU only (not run on CPU machines): the one line that calls torch.cuda.set_device."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    device = set_worker_device("cuda")
    assert device.type == "cuda" and torch.cuda.current_device() == device.index
