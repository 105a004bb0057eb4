"""Dispatch modes and method binding, run in-process (no Ray) through a tiny local worker group."""

import pickle

import numpy as np
import pytest
import torch
from verl import DataProto
from verl.single_controller.base import ClassWithInitArgs, ResourcePool, Worker
from verl.single_controller.base.decorator import (
    DISPATCH_MODES,
    Dispatch,
    Execute,
    make_nd_compute_dataproto_dispatch_fn,
    register,
    register_dispatch_mode,
)

from .in_process_group import InProcessGroup


class RowWorker(Worker):
    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def tag(self, data: DataProto) -> DataProto:
        return DataProto.from_dict(
            tensors={"x": data.batch["x"], "rank": torch.full((len(data),), self.rank)},
        )

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def declare(self, tp: int) -> None:
        self._register_dispatch_collect_info("mesh", dp_rank=self.rank // tp, is_collect=self.rank % tp == 0)

    @register(dispatch_mode=make_nd_compute_dataproto_dispatch_fn("mesh"))
    def mesh_tag(self, data: DataProto) -> DataProto:
        return self.tag.__wrapped__(self, data)

    @register(dispatch_mode=Dispatch.ALL_TO_ALL)
    def echo(self, value):
        return value


def batch(n: int) -> DataProto:
    return DataProto.from_dict(
        tensors={"x": torch.arange(n).unsqueeze(1)}, non_tensors={"i": np.arange(n, dtype=object)}
    )


def test_dp_compute_proto_splits_pads_and_unpads():
    wg = InProcessGroup(RowWorker, 3)
    out = wg.tag(batch(7))  # 7 rows -> padded to 9 -> chunks of 3 -> cut back to 7
    assert out.batch["x"].flatten().tolist() == list(range(7))
    assert out.batch["rank"].tolist() == [0, 0, 0, 1, 1, 1, 2]


def test_mesh_dispatch_sends_dp_chunks_and_collects_marked_ranks():
    wg = InProcessGroup(RowWorker, 4)
    wg.declare(tp=2)  # dp ranks [0, 0, 1, 1]; ranks 0 and 2 collected
    out = wg.mesh_tag(batch(5))  # padded to 6, chunks of 3 per dp rank
    assert out.batch["x"].flatten().tolist() == list(range(5))
    assert out.batch["rank"].tolist() == [0, 0, 0, 2, 2]


def test_mesh_dispatch_without_declaration_names_the_ranks():
    wg = InProcessGroup(RowWorker, 2)
    with pytest.raises(ValueError, match=r"worker ranks \[0, 1\] never called"):
        wg.mesh_tag(batch(2))


def test_dp_compute_proto_rejects_unsplittable_input():
    wg = InProcessGroup(RowWorker, 2)
    with pytest.raises(ValueError, match="empty DataProto"):
        wg.tag(batch(0))
    with pytest.raises(TypeError, match=r"argument 0 is a Tensor"):
        wg.tag(torch.zeros(4))


def test_dispatch_mode_registry_and_enum():
    def dispatch(wg, *args, **kwargs):
        return tuple([a] * wg.world_size for a in args), kwargs

    def collect(wg, outputs):
        return sum(outputs)

    mode = register_dispatch_mode("TEST_SUM", dispatch, collect)
    try:
        assert Dispatch.TEST_SUM is mode and mode in Dispatch
        assert pickle.loads(pickle.dumps(mode)) is mode

        class SumWorker(Worker):
            @register(dispatch_mode=Dispatch.TEST_SUM)
            def plus_rank(self, x):
                return x + self.rank

        assert InProcessGroup(SumWorker, 3).plus_rank(10) == 10 + 11 + 12
        with pytest.raises(ValueError, match="already registered"):
            register_dispatch_mode("TEST_SUM", dispatch, collect)
    finally:
        DISPATCH_MODES.unregister("TEST_SUM")
        Dispatch.remove("TEST_SUM")
    with pytest.raises(AttributeError, match=r"no member 'NOPE'; known: RANK_ZERO, ONE_TO_ALL"):
        Dispatch.NOPE  # noqa: B018
    with pytest.raises(KeyError, match="unknown Dispatch 'NOPE'; known: RANK_ZERO"):
        register(dispatch_mode="NOPE")
    assert [m.name for m in Execute] == ["ALL", "RANK_ZERO"]


def test_all_to_all_and_unregistered_method_errors():
    wg = InProcessGroup(RowWorker, 2)
    assert wg.echo([1, 2]) == [1, 2]
    with pytest.raises(AttributeError, match="registered methods: declare, echo, mesh_tag, tag"):
        wg.missing()


def test_worker_rendezvous_env_and_class_with_init_args(monkeypatch):
    for key in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.setenv(key, "x")  # recorded, so teardown restores what Worker() writes below
        monkeypatch.delenv(key)
    w = ClassWithInitArgs(Worker)()
    addr, port = w.get_master_addr_port()
    assert (w.rank, w.world_size) == (0, 1) and addr and int(port) > 0
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("MASTER_ADDR", "10.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "1234")
    w = Worker()
    assert (w.rank, w.world_size, w.get_master_addr_port()) == (3, 4, ("10.0.0.1", "1234"))
    pool = ResourcePool([2, 3])
    assert pool.world_size == 5 and pool.local_rank_list() == [0, 1, 0, 1, 2]
    with pytest.raises(ValueError, match=r"process_on_nodes\[1\] must be a positive int"):
        ResourcePool([2, 0])
