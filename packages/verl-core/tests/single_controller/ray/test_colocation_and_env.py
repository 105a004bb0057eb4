"""Upstream's worker-group API on real Ray workers: worker_env (and its protected keys),
RAY_LOCAL_WORLD_SIZE, create_colocated_worker_raw_cls (FusedWorker) and RayWorkerGroup.fuse."""

import os
import sys

import pytest
import torch

ray = pytest.importorskip("ray")

from verl import DataProto  # noqa: E402
from verl.single_controller.base import ClassWithInitArgs, Worker  # noqa: E402
from verl.single_controller.base.decorator import Dispatch, register  # noqa: E402
from verl.single_controller.ray import (  # noqa: E402
    RayClassWithInitArgs,
    RayResourcePool,
    RayWorkerGroup,
    create_colocated_worker_raw_cls,
)

ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


class Actor(Worker):
    def __init__(self, offset: float):
        super().__init__()
        self.offset = offset

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def whoami(self):
        return "actor", os.getpid(), self.rank

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def add_offset(self, data: DataProto) -> DataProto:
        return DataProto.from_dict(tensors={"x": data.batch["x"] + self.offset})

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def ask_critic(self):
        # a role reaches its sibling in the same process through fused_worker_dict
        return self.get_fused_worker_by_name("critic").scale * self.offset

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def env(self, *names):
        return [os.environ.get(n) for n in names]

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def torch_threads(self):
        return torch.get_num_threads()


class Critic(Worker):
    def __init__(self, scale: float = 3.0):
        super().__init__()
        self.scale = scale

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def whoami(self):
        return "critic", os.getpid(), self.rank

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    async def negate(self, data: DataProto) -> DataProto:
        return DataProto.from_dict(tensors={"x": -data.batch["x"]})


def cpu_pool(n: int = 2) -> RayResourcePool:
    return RayResourcePool(process_on_nodes=[n], use_gpu=False, max_colocate_count=1, num_cpus_per_worker=0.25)


def test_raw_fused_class_in_this_process(monkeypatch):
    for key, value in {"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}.items():
        monkeypatch.setenv(key, value)
    cls = create_colocated_worker_raw_cls({"actor": ClassWithInitArgs(Actor, offset=2.0),
                                           "critic": RayClassWithInitArgs(ray.remote(Critic), scale=5.0)})
    assert cls.__name__ == "FusedWorker_actor_critic" and cls.is_fused_worker and issubclass(cls, Worker)
    assert cls.raw_cls_dict == {"actor": Actor, "critic": Critic}
    w = cls()
    assert w.actor is w.fused_worker_dict["actor"] and w.critic.scale == 5.0
    assert w.critic.fused_worker_dict is w.fused_worker_dict and w.actor.ask_critic() == 10.0
    assert w._fuw_execute("actor_fwmn_whoami") == ("actor", os.getpid(), 0)
    assert w.actor_whoami() == w._fuw_execute("actor_fwmn_whoami")  # the role-prefixed registered method
    with pytest.raises(ValueError, match="expected '<role>_fwmn_<method>'"):
        w._fuw_execute("reward_fwmn_whoami")
    with pytest.raises(TypeError, match="critic.negate is async; call the registered method critic_negate"):
        w._fuw_execute("critic_fwmn_negate", None)
    with pytest.raises(TypeError, match="must subclass"):
        create_colocated_worker_raw_cls({"x": ClassWithInitArgs(dict)})
    with pytest.raises(ValueError, match="role name 'rank'"):
        create_colocated_worker_raw_cls({"rank": ClassWithInitArgs(Actor, offset=1.0)})


def test_protected_worker_env_is_refused_before_any_worker_starts():
    for key in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "RAY_LOCAL_WORLD_SIZE", "WG_PREFIX"):
        # no placement group or actor is made: the check comes first (no Ray needed)
        with pytest.raises(ValueError, match=rf"worker_env cannot override \['{key}'\]"):
            RayWorkerGroup(resource_pool=None, ray_cls_with_init=None, worker_env={key: "1"})
    with pytest.raises(ValueError, match="must map str to str"):
        RayWorkerGroup(resource_pool=None, ray_cls_with_init=None, worker_env={"OK_NAME": 3})


@pytest.fixture(scope="module")
def fused_group(ray_cluster):
    class_dict = {"actor": RayClassWithInitArgs(Actor, offset=1.5), "critic": RayClassWithInitArgs(Critic)}
    cia = RayClassWithInitArgs(create_colocated_worker_raw_cls(class_dict))
    return RayWorkerGroup(cpu_pool(), cia, worker_env={"VERL_TEST_GREETING": "hello", "OMP_NUM_THREADS": "2"})


def test_worker_env_and_ray_local_world_size_reach_the_workers(fused_group):
    names = ("VERL_TEST_GREETING", "OMP_NUM_THREADS", "RAY_LOCAL_WORLD_SIZE", "LOCAL_WORLD_SIZE", "RANK",
             "VERL_WORKER_NUM_CPUS")
    assert fused_group.actor_env(*names) == [["hello", "2", "2", "2", "0", "0.25"], ["hello", "2", "2", "2", "1", "0.25"]]


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="torch caps its threads at the cores")
def test_a_users_omp_num_threads_wins_over_the_reservation(fused_group):
    # each worker reserved 0.25 CPU (one thread by the rule); the user's OMP_NUM_THREADS=2 wins
    assert fused_group.actor_torch_threads() == [2, 2]


def test_fuse_gives_per_role_views_on_the_same_processes(fused_group):
    fused_group.fuse(["actor", "critic"])
    actor, critic = fused_group.actor.whoami(), fused_group.critic.whoami()
    assert [a[0] for a in actor] == ["actor", "actor"] and [c[0] for c in critic] == ["critic", "critic"]
    assert [a[1:] for a in actor] == [c[1:] for c in critic]  # one process per rank holds both roles
    assert len({a[1] for a in actor}) == 2
    assert fused_group.actor.ask_critic() == [3.0 * 1.5] * 2
    data = DataProto.from_dict(tensors={"x": torch.arange(4.0).unsqueeze(1)})
    torch.testing.assert_close(fused_group.actor.add_offset(data).batch["x"], data.batch["x"] + 1.5)
    torch.testing.assert_close(fused_group.critic.negate(data).batch["x"], -data.batch["x"])  # async role method
    # upstream's by-name entry on the same actors
    assert fused_group.execute_all_sync("_fuw_execute", "actor_fwmn_whoami") == actor
    with pytest.raises(KeyError, match="no role 'reward'"):
        fused_group.fuse(["reward"])
