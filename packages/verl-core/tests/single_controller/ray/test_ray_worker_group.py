"""RayWorkerGroup on CPU: rendezvous, dispatch modes, futures across groups, colocation, failures."""

import asyncio
import os
import signal
import sys
import threading

import numpy as np
import pytest
import torch

ray = pytest.importorskip("ray")

from verl import DataProto  # noqa: E402
from verl.protocol import DataProtoFuture  # noqa: E402
from verl.single_controller.base import Worker  # noqa: E402
from verl.single_controller.base.decorator import (  # noqa: E402
    Dispatch,
    Execute,
    make_nd_compute_dataproto_dispatch_fn,
    register,
)
from verl.single_controller.ray import (  # noqa: E402
    RayClassWithInitArgs,
    RayResourcePool,
    RayWorkerGroup,
    ResourcePoolManager,
    WorkerDiedError,
    WorkerError,
    create_colocated_worker_cls,
)

# pytest imports this file under a generated name, so Ray workers cannot import it: ship it by value.
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


def _marked(data: DataProto, rank: int, factor: float) -> DataProto:
    """x * factor plus a column saying which worker produced each row."""
    x = data.batch["x"]
    return DataProto.from_dict(
        tensors={"x": x * factor, "rank": torch.full((len(data),), rank)},
        non_tensors={"uid": data.non_tensor_batch["uid"]},
    )


class EchoWorker(Worker):
    def __init__(self, factor: float = 2.0):
        super().__init__()
        self.factor = factor

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def all_reduce_ranks(self):
        import torch.distributed as dist

        if not dist.is_initialized():
            dist.init_process_group(backend="gloo")
        t = torch.tensor([float(self.rank + 1)])
        dist.all_reduce(t)
        return t.item(), dist.get_rank(), dist.get_world_size()

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def scale(self, data: DataProto) -> DataProto:
        return _marked(data, self.rank, self.factor)

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO, blocking=False)
    def scale_later(self, data: DataProto) -> DataProto:
        return _marked(data, self.rank, self.factor)

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    async def scale_async(self, data: DataProto) -> DataProto:
        await asyncio.sleep(0.01)
        return _marked(data, self.rank, self.factor)

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO_WITH_FUNC)
    def apply(self, fn, data: DataProto) -> DataProto:
        return DataProto.from_dict(tensors={"x": fn(data.batch["x"])})

    @register(dispatch_mode=Dispatch.DP_COMPUTE_METRIC)
    def row_count(self, data: DataProto) -> int:
        return len(data)

    @register(dispatch_mode=Dispatch.DP_COMPUTE)
    def add_rank(self, value: int) -> int:
        return value + 100 * self.rank

    @register(dispatch_mode=Dispatch.RANK_ZERO)
    def who_answers(self) -> int:
        return self.rank

    @register(dispatch_mode=Dispatch.ONE_TO_ALL, execute_mode=Execute.RANK_ZERO)
    def only_rank_zero(self) -> int:
        return self.rank

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def declare_mesh(self, mesh_name: str, tp: int, reverse: bool = False) -> None:
        dp_rank = self.rank // tp
        if reverse:
            dp_rank = self.world_size // tp - 1 - dp_rank
        self._register_dispatch_collect_info(mesh_name, dp_rank=dp_rank, is_collect=self.rank % tp == 0)

    @register(dispatch_mode=make_nd_compute_dataproto_dispatch_fn("tp2"))
    def mesh_tp2(self, data: DataProto) -> DataProto:
        return _marked(data, self.rank, 1.0)

    @register(dispatch_mode=make_nd_compute_dataproto_dispatch_fn("rev"))
    def mesh_rev(self, data: DataProto) -> DataProto:
        return _marked(data, self.rank, 1.0)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def fail_on_rank_one(self, message: str) -> None:
        if self.rank == 1:
            raise ValueError(message)

    def not_registered(self) -> int:
        return 1


class ActorRole(Worker):
    def __init__(self, offset: float):
        super().__init__()
        self.offset = offset

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def add_offset(self, data: DataProto) -> DataProto:
        return DataProto.from_dict(tensors={"x": data.batch["x"] + self.offset})

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def whoami(self):
        return "actor", os.getpid(), self.rank


class CriticRole(Worker):
    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def whoami(self):
        return "critic", os.getpid(), self.rank

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    async def negate(self, data: DataProto) -> DataProto:
        return DataProto.from_dict(tensors={"x": -data.batch["x"]})


class SleepyWorker(Worker):
    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def pid(self) -> int:
        return os.getpid()

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def wait_forever_on_rank_zero(self) -> None:
        # Rank 0 never returns: only failure detection on rank 1 can end the call.
        if self.rank == 0:
            threading.Event().wait()
        threading.Event().wait(60)


def make_batch(n: int) -> DataProto:
    return DataProto.from_dict(
        tensors={"x": torch.arange(n, dtype=torch.float32).unsqueeze(1).repeat(1, 3)},
        non_tensors={"uid": np.array([f"u{i}" for i in range(n)], dtype=object)},
    )


def cpu_pool(n: int = 2) -> RayResourcePool:
    return RayResourcePool(
        process_on_nodes=[n], use_gpu=False, max_colocate_count=1, num_cpus_per_worker=0.25
    )


@pytest.fixture(scope="module")
def echo_group(ray_cluster):
    return RayWorkerGroup(cpu_pool(), RayClassWithInitArgs(EchoWorker, factor=2.0))


def test_gloo_all_reduce_across_two_workers(echo_group):
    # ranks 0 and 1 contribute 1 and 2: both see 3 after the all-reduce
    assert echo_group.all_reduce_ranks() == [(3.0, 0, 2), (3.0, 1, 2)]
    assert echo_group.world_size == 2


def test_dp_compute_proto_pads_and_unpads(echo_group):
    data = make_batch(5)  # 5 rows on 2 workers: padded to 6, result cut back to 5
    out = echo_group.scale(data)
    assert len(out) == 5
    torch.testing.assert_close(out.batch["x"], data.batch["x"] * 2)
    assert out.non_tensor_batch["uid"].tolist() == [f"u{i}" for i in range(5)]
    # rows 0-2 went to rank 0, rows 3-5 (5 = padding) to rank 1
    assert out.batch["rank"].tolist() == [0, 0, 0, 1, 1]


def test_dp_compute_proto_with_func_metric_and_dp_compute(echo_group):
    data = make_batch(4)
    out = echo_group.apply(lambda x: x + 10, data)
    torch.testing.assert_close(out.batch["x"], data.batch["x"] + 10)
    assert echo_group.row_count(make_batch(6)) == [3, 3]
    assert echo_group.add_rank([1, 2]) == [1, 102]
    assert echo_group.who_answers() == 0
    assert echo_group.only_rank_zero() == [0]
    assert echo_group.execute_all("add_rank", [5, 6]) == [5, 106]
    assert echo_group.execute_rank_zero("add_rank", 7) == 7


def test_non_blocking_returns_future_and_async_method(echo_group):
    data = make_batch(5)
    fut = echo_group.scale_later(data)
    assert isinstance(fut, DataProtoFuture)
    got = fut.get()
    torch.testing.assert_close(got.batch["x"], data.batch["x"] * 2)
    assert len(got) == 5
    out = echo_group.scale_async(data)
    torch.testing.assert_close(out.batch["x"], data.batch["x"] * 2)
    refs = echo_group.execute_all_async("add_rank", [1, 2])
    assert ray.get(refs) == [1, 102]


def test_mesh_dispatch_collects_declared_ranks(echo_group):
    echo_group.declare_mesh("tp2", tp=2)  # both workers share dp rank 0; only rank 0 is collected
    echo_group.declare_mesh("rev", tp=1, reverse=True)  # rank 0 has dp rank 1 and vice versa
    data = make_batch(4)
    out = echo_group.mesh_tp2(data)
    torch.testing.assert_close(out.batch["x"], data.batch["x"])
    assert out.batch["rank"].tolist() == [0, 0, 0, 0]
    out = echo_group.mesh_rev(make_batch(3))  # padded to 4; dp rank 0 (worker 1) gets rows 0-1
    torch.testing.assert_close(out.batch["x"], make_batch(3).batch["x"])
    assert out.batch["rank"].tolist() == [1, 1, 0]


def test_bad_dispatch_errors_in_user_terms(echo_group):
    with pytest.raises(TypeError, match=r"argument 0 is a dict"):
        echo_group.scale({"x": 1})
    with pytest.raises(ValueError, match=r"list of length world_size=2; argument 0 is a list of length 3"):
        echo_group.add_rank([1, 2, 3])
    with pytest.raises(AttributeError, match=r"EchoWorker.not_registered is not registered"):
        echo_group.not_registered()
    with pytest.raises(AttributeError, match=r"has no method 'no_such_method'.*scale"):
        echo_group.no_such_method()


def test_raising_worker_names_rank_method_and_traceback(echo_group):
    with pytest.raises(WorkerError) as info:
        echo_group.fail_on_rank_one("boom 42")
    message = str(info.value)
    assert "worker rank 1" in message
    assert "`fail_on_rank_one`" in message
    assert "ValueError: boom 42" in message
    assert 'test_ray_worker_group.py", line' in message and "in fail_on_rank_one" in message  # remote frames
    assert info.value.rank == 1
    # the group is still usable after a method raised
    assert echo_group.add_rank([0, 0]) == [0, 100]


def test_colocated_roles_share_processes_and_consume_another_groups_future(echo_group):
    class_dict = {
        "actor": RayClassWithInitArgs(ActorRole, offset=1.0),
        "critic": RayClassWithInitArgs(CriticRole),
    }
    group = RayWorkerGroup(cpu_pool(), create_colocated_worker_cls(class_dict))
    views = group.spawn(prefix_set=class_dict.keys())
    actor_who, critic_who = views["actor"].whoami(), views["critic"].whoami()
    assert [w[0] for w in actor_who] == ["actor", "actor"] and [w[0] for w in critic_who] == [
        "critic",
        "critic",
    ]
    assert [w[1:] for w in actor_who] == [w[1:] for w in critic_who]  # same pid and rank per worker
    assert group.actor_whoami() == actor_who  # role-prefixed methods on the full group
    data = make_batch(4)
    torch.testing.assert_close(views["critic"].negate(data).batch["x"], -data.batch["x"])
    # a future from the echo group goes straight to the actor role's workers
    fut = echo_group.scale_later(data)
    out = views["actor"].add_offset(fut)
    torch.testing.assert_close(out.batch["x"], data.batch["x"] * 2 + 1)


def test_resource_pool_manager_maps_roles_to_pools(ray_cluster):
    manager = ResourcePoolManager(
        resource_pool_spec={"global_pool": [2]},
        mapping={"actor": "global_pool", "critic": "global_pool"},
        use_gpu=False,
        num_cpus_per_worker=0.25,
    )
    pool = manager.get_resource_pool("actor")
    assert pool is manager.get_resource_pool("critic") and pool.world_size == 2
    with pytest.raises(KeyError, match="mapped roles: actor, critic"):
        manager.get_resource_pool("reward")
    with pytest.raises(ValueError, match="not in resource_pool_spec"):
        ResourcePoolManager(resource_pool_spec={"a": [1]}, mapping={"actor": "b"})
    with pytest.raises(ValueError, match="needs 2 bundles"):
        RayResourcePool(
            [2], use_gpu=False, max_colocate_count=1, num_cpus_per_worker=100
        ).get_placement_groups()


def test_killed_worker_fails_pending_and_next_call(ray_cluster):
    group = RayWorkerGroup(cpu_pool(), RayClassWithInitArgs(SleepyWorker))
    pids = group.pid()
    killer = threading.Timer(1.0, os.kill, (pids[1], signal.SIGKILL))
    killer.start()
    with pytest.raises(WorkerDiedError) as info:
        group.wait_forever_on_rank_zero()  # hangs forever unless the death of rank 1 is noticed
    killer.join()
    assert "worker rank 1" in str(info.value) and f"pid {pids[1]}" in str(info.value)
    assert "died while running `wait_forever_on_rank_zero`" in str(info.value)
    with pytest.raises(WorkerDiedError, match=rf"cannot run `pid`: worker rank 1 .*pid {pids[1]}"):
        group.pid()
    for worker in group.workers:
        ray.kill(worker)
