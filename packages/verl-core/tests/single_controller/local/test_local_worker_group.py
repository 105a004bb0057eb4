"""LocalWorkerGroup: the registered methods of one worker, called in this process with the Ray backend's
dispatch and collect semantics."""

import asyncio
import os

import numpy as np
import pytest
import torch
from verl import DataProto
from verl.single_controller.base.decorator import Dispatch, Execute, register
from verl.single_controller.base.worker import Worker
from verl.single_controller.base.worker_group import ClassWithInitArgs
from verl.single_controller.local import LocalWorkerGroup


class Doubler(Worker):
    def __init__(self, factor: float):
        super().__init__()
        self.factor = factor
        self.calls = []

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def where(self):
        return os.getpid(), self.rank, self.world_size

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def scale(self, data: DataProto) -> DataProto:
        self.calls.append(len(data))
        return DataProto.from_dict(tensors={"y": data.batch["x"] * self.factor},
                                   non_tensors={"uid": data.non_tensor_batch["uid"]})

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    async def scale_async(self, data: DataProto) -> DataProto:
        await asyncio.sleep(0)
        return DataProto.from_dict(tensors={"y": data.batch["x"] + 1})

    @register(dispatch_mode=Dispatch.ONE_TO_ALL, execute_mode=Execute.RANK_ZERO)
    def first(self, values: list):
        return values

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def fail(self):
        raise RuntimeError("worker method failed on purpose")

    def not_registered(self):
        return 0


@pytest.fixture
def group(monkeypatch):
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(key, raising=False)
    return LocalWorkerGroup(ClassWithInitArgs(Doubler, factor=3.0))


def test_methods_run_here_with_dispatch_and_collect(group):
    assert group.world_size == 1
    assert group.where() == [(os.getpid(), 0, 1)]  # ONE_TO_ALL: a list of one result, from this process
    data = DataProto.from_dict(tensors={"x": torch.arange(5.0)}, non_tensors={"uid": np.array(list("abcde"), dtype=object)})
    out = group.scale(data)
    assert torch.equal(out.batch["y"], torch.arange(5.0) * 3) and list(out.non_tensor_batch["uid"]) == list("abcde")
    assert group.worker.calls == [5]
    assert torch.equal(group.scale_async(data).batch["y"], torch.arange(5.0) + 1)
    assert group.first([1]) == [[1]]  # the list argument reached the worker whole (ONE_TO_ALL), as on Ray


def test_errors_propagate_and_unregistered_methods_are_named(group):
    with pytest.raises(RuntimeError, match="failed on purpose"):
        group.fail()
    with pytest.raises(AttributeError, match="Doubler.not_registered is not registered"):
        group.not_registered()


def test_refuses_a_world_larger_than_one(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "1")
    with pytest.raises(ValueError, match="WORLD_SIZE=2"):
        LocalWorkerGroup(ClassWithInitArgs(Doubler, factor=1.0))
