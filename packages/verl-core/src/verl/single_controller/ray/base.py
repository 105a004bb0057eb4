"""The Ray backend of the single controller.

``RayResourcePool`` reserves placement-group bundles (CPU-only or CPU+GPU), ``RayWorkerGroup`` starts
one actor per bundle slot with the torch.distributed rendezvous environment set, binds every
registered worker method onto itself and turns Ray's failures into errors that name the worker.
"""

from __future__ import annotations

import uuid
from typing import Any

import numpy as np
import ray
import torch
from ray.util.placement_group import PlacementGroup, placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from verl.protocol import DataProto
from verl.single_controller.base import ClassWithInitArgs, ResourcePool, Worker, WorkerGroup
from verl.single_controller.base.colocation import FusedWorker, create_colocated_worker_raw_cls
from verl.single_controller.base.decorator import registered_methods
from verl.single_controller.base.errors import WorkerDiedError, WorkerError
from verl.single_controller.base.worker import get_free_port
from verl.utils.ray_transport import install_tensor_transport

__all__ = [
    "RayResourcePool",
    "RayClassWithInitArgs",
    "RayWorkerGroup",
    "WorkerError",
    "WorkerDiedError",
    "create_colocated_worker_cls",
    "create_colocated_worker_cls_fused",
    "create_colocated_worker_raw_cls",
]

PLACEMENT_GROUP_TIMEOUT_S = 120.0

#: set by RayWorkerGroup in every worker; ``worker_env`` may not override them (upstream's protected set
#: plus the keys only we set)
PROTECTED_WORKER_ENV = (
    "WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "RAY_LOCAL_WORLD_SIZE", "MASTER_ADDR",
    "MASTER_PORT", "WG_PREFIX", "WG_BACKEND", "VERL_RAY_TENSOR_TRANSPORT", "VERL_WORKER_NUM_CPUS",
)


class RayResourcePool(ResourcePool):
    """Placement groups for a worker group: one STRICT_PACK group per entry of ``process_on_nodes``.

    Each worker slot is a bundle of ``num_cpus_per_worker * max_colocate_count`` CPUs (plus one GPU
    when ``use_gpu``); up to ``max_colocate_count`` worker groups can share the slots, each actor
    taking ``num_cpus_per_worker`` CPUs (and ``1 / max_colocate_count`` GPU). Fractional CPUs let
    tests run several workers on a small machine.
    """

    def __init__(
        self,
        process_on_nodes: list[int] | None = None,
        use_gpu: bool = True,
        name_prefix: str | None = None,
        max_colocate_count: int = 10,
        detached: bool = False,
        accelerator_type: str | None = None,
        num_cpus_per_worker: float = 1.0,
        n_gpus_per_node: int = 8,
    ):
        super().__init__(process_on_nodes, max_colocate_count, n_gpus_per_node)
        if num_cpus_per_worker <= 0:
            raise ValueError(f"num_cpus_per_worker must be > 0, got {num_cpus_per_worker}")
        self.use_gpu = use_gpu
        self.name_prefix = name_prefix or ""
        self.detached = detached
        self.accelerator_type = accelerator_type
        self.num_cpus_per_worker = num_cpus_per_worker
        self.pgs: list[PlacementGroup] | None = None

    def bundle(self) -> dict[str, float]:
        b = {"CPU": self.num_cpus_per_worker * self.max_colocate_count}
        if self.use_gpu:
            b["GPU"] = 1
        if self.accelerator_type:
            b[f"accelerator_type:{self.accelerator_type}"] = 1e-4
        return b

    def actor_resources(self) -> dict[str, float]:
        res = {"num_cpus": self.num_cpus_per_worker}
        if self.use_gpu:
            res["num_gpus"] = 1 / self.max_colocate_count
        return res

    def get_placement_groups(
        self, strategy: str = "STRICT_PACK", name: str | None = None
    ) -> list[PlacementGroup]:
        """Reserve (once) and return the placement groups; fails fast when the cluster cannot fit them."""
        if self.pgs is not None:
            return self.pgs
        bundle = self.bundle()
        total = ray.cluster_resources()
        for key, per in bundle.items():
            need = per * self.world_size
            if key in ("CPU", "GPU") and total.get(key, 0) < need - 1e-9:
                raise ValueError(
                    f"resource pool {self.name_prefix or '(unnamed)'} needs {self.world_size} bundles of {bundle} "
                    f"= {need:g} {key}, but the Ray cluster has {total.get(key, 0):g} {key}; lower "
                    f"process_on_nodes / max_colocate_count / num_cpus_per_worker"
                    + (" or pass use_gpu=False" if key == "GPU" else "")
                )
        lifetime = "detached" if self.detached else None
        tag = name or f"{self.name_prefix}verl_group_{'_'.join(map(str, self.store))}_{uuid.uuid4().hex[:6]}"
        pgs = [
            placement_group(
                [dict(bundle) for _ in range(n)], strategy=strategy, name=f"{tag}:{i}", lifetime=lifetime
            )
            for i, n in enumerate(self.store)
        ]
        ready, not_ready = ray.wait(
            [pg.ready() for pg in pgs], num_returns=len(pgs), timeout=PLACEMENT_GROUP_TIMEOUT_S
        )
        if not_ready:
            for pg in pgs:
                ray.util.remove_placement_group(pg)
            raise TimeoutError(
                f"could not reserve placement groups {self.store} x {bundle} within {PLACEMENT_GROUP_TIMEOUT_S:.0f}s; "
                f"available now: {ray.available_resources()}"
            )
        self.pgs = pgs
        return pgs

    def remove(self) -> None:
        """Release the placement groups (worker groups on them must be gone)."""
        for pg in self.pgs or []:
            ray.util.remove_placement_group(pg)
        self.pgs = None


class RayClassWithInitArgs(ClassWithInitArgs):
    """A worker class (plain or ``@ray.remote``) plus its constructor arguments."""

    def __init__(self, cls: Any, *args: Any, **kwargs: Any):
        super().__init__(cls, *args, **kwargs)
        self._options: dict[str, Any] = {}
        self._additional_resource: dict[str, float] = {}

    @property
    def user_cls(self) -> type:
        """The Python class the actor runs (unwraps ``@ray.remote``)."""
        if isinstance(self.cls, ray.actor.ActorClass):
            return self.cls.__ray_actor_class__
        return self.cls

    def update_options(self, options: dict[str, Any]) -> None:
        self._options.update(options)

    def set_additional_resource(self, additional_resource: dict[str, float]) -> None:
        self._additional_resource = dict(additional_resource)

    def __call__(
        self,
        placement_group: PlacementGroup,
        placement_group_bundle_idx: int,
        num_cpus: float = 1.0,
        num_gpus: float = 0.0,
        env_vars: dict[str, str] | None = None,
        name: str | None = None,
        lifetime: str | None = None,
    ):
        """Start the actor in bundle ``placement_group_bundle_idx`` of ``placement_group``."""
        remote_cls = self.cls if isinstance(self.cls, ray.actor.ActorClass) else ray.remote(self.cls)
        options = {
            "scheduling_strategy": PlacementGroupSchedulingStrategy(
                placement_group=placement_group, placement_group_bundle_index=placement_group_bundle_idx
            ),
            "num_cpus": num_cpus,
            "num_gpus": num_gpus,
            "max_restarts": 0,  # a dead worker is reported, not silently restarted mid-collective
            "max_task_retries": 0,
        }
        if self._additional_resource:
            options["resources"] = dict(self._additional_resource)
        if name:
            options["name"] = name
        if lifetime:
            options["lifetime"] = lifetime
        options.update(self._options)
        runtime_env = dict(options.pop("runtime_env", {}) or {})
        runtime_env["env_vars"] = {**(runtime_env.get("env_vars") or {}), **(env_vars or {})}
        options["runtime_env"] = runtime_env
        return remote_cls.options(**options).remote(*self.args, **self.kwargs)


def _is_large(value: Any) -> bool:
    return isinstance(value, (DataProto, torch.Tensor, np.ndarray))


def _driver_side_rendezvous(pg: PlacementGroup) -> dict[str, str]:
    """MASTER_ADDR/PORT for the group when rank 0's bundle is on the driver's node.

    Then the driver can pick the free port itself and start every actor at once; otherwise the
    values are empty and rank 0 picks them on its own node (the group waits for it first).
    """
    node_of_bundle = ray.util.placement_group_table(pg)["bundles_to_node_id"].get(0)
    if node_of_bundle is not None and node_of_bundle == ray.get_runtime_context().get_node_id():
        return {"MASTER_ADDR": ray.util.get_node_ip_address(), "MASTER_PORT": str(get_free_port())}
    # Empty (not absent) so rank 0 picks the rendezvous even if the cluster's env has stale values.
    return {"MASTER_ADDR": "", "MASTER_PORT": ""}


class RayWorkerGroup(WorkerGroup):
    """Workers on Ray actors, called like one object.

    ``RayWorkerGroup(resource_pool, RayClassWithInitArgs(cls=MyWorker, ...))`` starts
    ``resource_pool.world_size`` actors, gives each ``RANK``/``WORLD_SIZE``/``LOCAL_RANK``/
    ``LOCAL_WORLD_SIZE`` (and upstream's ``RAY_LOCAL_WORLD_SIZE``)/``MASTER_ADDR``/``MASTER_PORT`` and
    binds every ``@register``-ed method of ``MyWorker`` onto the group.

    ``worker_env={"NAME": "value"}`` adds environment variables to every worker process; overriding
    one the group sets itself (`PROTECTED_WORKER_ENV`) is a ValueError, as upstream.
    """

    def __init__(
        self,
        resource_pool: RayResourcePool | None = None,
        ray_cls_with_init: RayClassWithInitArgs | None = None,
        bin_pack: bool = True,
        name_prefix: str | None = None,
        detached: bool = False,
        poll_interval_s: float = 0.5,
        worker_env: dict[str, str] | None = None,
        **kwargs: Any,
    ):
        super().__init__(resource_pool=resource_pool, **kwargs)
        self.customized_worker_env = _check_worker_env(worker_env)
        if ray_cls_with_init is None:
            raise ValueError(
                "RayWorkerGroup needs ray_cls_with_init=RayClassWithInitArgs(cls=YourWorker, ...)"
            )
        if resource_pool is None:
            raise ValueError(
                "RayWorkerGroup needs a resource_pool (RayResourcePool(process_on_nodes=[n], ...))"
            )
        user_cls = ray_cls_with_init.user_cls
        if not (isinstance(user_cls, type) and issubclass(user_cls, Worker)):
            raise TypeError(f"worker class {user_cls!r} must subclass verl.single_controller.base.Worker")
        self.ray_cls_with_init = ray_cls_with_init
        self.resource_pool = resource_pool
        self.name_prefix = name_prefix or f"wg{uuid.uuid4().hex[:6]}_"
        self._poll_interval_s = poll_interval_s
        self._worker_info: list[dict] = []
        self._dead: dict[int, str] = {}  # rank -> description of how it died (shared with spawned views)
        # method name -> one Ray ActorMethod per worker; built on first call (Ray makes a new one per getattr)
        self._method_handles: dict[str, list] = {}
        self._actor_cls_name = user_cls.__name__
        self._init_with_resource_pool(resource_pool, ray_cls_with_init, detached)
        self._bind_worker_method(user_cls)

    # --- start-up ---------------------------------------------------------------------------------

    def _init_with_resource_pool(
        self, pool: RayResourcePool, cia: RayClassWithInitArgs, detached: bool
    ) -> None:
        install_tensor_transport()
        pgs = pool.get_placement_groups()
        world_size = pool.world_size
        res = pool.actor_resources()
        master = _driver_side_rendezvous(pgs[0])
        rank = 0
        for pg_idx, (pg, local_world) in enumerate(zip(pgs, pool.store)):
            for local_rank in range(local_world):
                env = {
                    "RANK": str(rank),
                    "WORLD_SIZE": str(world_size),
                    "LOCAL_RANK": str(local_rank),
                    "LOCAL_WORLD_SIZE": str(local_world),
                    "RAY_LOCAL_WORLD_SIZE": str(local_world),
                    "WG_PREFIX": self.name_prefix,
                    "WG_BACKEND": "ray",
                    "VERL_RAY_TENSOR_TRANSPORT": "1",
                    # the CPUs this actor reserves: Worker.__init__ runs that many torch threads
                    "VERL_WORKER_NUM_CPUS": str(res["num_cpus"]),
                    **master,
                    **self.customized_worker_env,  # checked: never one of the keys above
                }
                name = f"{self.name_prefix}{self._actor_cls_name}_{pg_idx}:{local_rank}"
                actor = cia(
                    pg,
                    local_rank,
                    num_cpus=res["num_cpus"],
                    num_gpus=res.get("num_gpus", 0.0),
                    env_vars=env,
                    name=name,
                    lifetime="detached" if detached else None,
                )
                self._workers.append(actor)
                self._worker_names.append(name)
                self._worker_info.append({"pid": "?", "node_ip": "?", "rank": rank})
                if rank == 0 and not master["MASTER_ADDR"]:
                    # Rank 0 chose the rendezvous address on its own node; the others are told it.
                    addr, port = self._resolve([actor.get_master_addr_port.remote()], [0], "__init__")[0]
                    master = {"MASTER_ADDR": addr, "MASTER_PORT": port}
                rank += 1
        self._master_addr, self._master_port = master["MASTER_ADDR"], master["MASTER_PORT"]
        refs = [w._get_worker_info.remote() for w in self._workers]
        self._worker_info = self._resolve(refs, list(range(world_size)), "__init__")

    @property
    def worker_names(self) -> list[str]:
        return self._worker_names

    @property
    def workers(self) -> list:
        return self._workers

    @property
    def worker_pids(self) -> list[int]:
        """The OS process id of each rank's worker (to watch or signal it from outside Ray)."""
        return [int(info["pid"]) for info in self._worker_info]

    def get_master_addr_port(self) -> tuple[str, str]:
        return self._master_addr, self._master_port

    # --- execution ----------------------------------------------------------------------------------

    def _execute(self, method_name: str, args: tuple, kwargs: dict, rank_zero: bool, blocking: bool) -> list:
        refs, ranks = self._submit(method_name, args, kwargs, rank_zero, scatter=True)
        return self._resolve(refs, ranks, method_name) if blocking else refs

    def _submit(self, method_name: str, args: tuple, kwargs: dict, rank_zero: bool, scatter: bool):
        self._check_alive(method_name)
        n = len(self._workers)
        ranks = [0] if rank_zero else list(range(n))

        def prepare(value):
            if not (scatter and isinstance(value, (list, tuple)) and len(value) == n):
                value = [value] * n
            if n > 1 and len(ranks) > 1 and _is_large(value[0]) and all(v is value[0] for v in value):
                # One object for every worker: store it once instead of serialising it n times.
                value = [ray.put(value[0])] * n
            return value

        args = [prepare(a) for a in args]
        kwargs = {k: prepare(v) for k, v in kwargs.items()}
        handles = self._method_handles.get(method_name)
        if handles is None:
            handles = self._method_handles[method_name] = self._actor_methods(method_name)
        if not kwargs:
            refs = [handles[r].remote(*(a[r] for a in args)) for r in ranks]
        else:
            refs = [
                handles[r].remote(*(a[r] for a in args), **{k: v[r] for k, v in kwargs.items()})
                for r in ranks
            ]
        return refs, ranks

    def _actor_methods(self, method_name: str) -> list:
        handles = []
        for r, worker in enumerate(self._workers):
            try:
                handles.append(getattr(worker, method_name))
            except AttributeError:
                raise AttributeError(
                    f"worker class {self._actor_cls_name} has no method {method_name!r} (called on worker rank {r})"
                ) from None
        return handles

    def _resolve(self, refs: list, ranks: list[int], method_name: str) -> list:
        """Wait for every result; the first failure (raise or death) is raised at once, naming the worker.

        The fast path is one ``ray.get``. While results are outstanding it wakes every
        ``poll_interval_s`` and looks at the newly finished results for an error, so a dead or
        raising rank is reported even when the other ranks block (e.g. in a collective waiting for it).
        """
        probed: set = set()
        while True:
            try:
                return ray.get(refs, timeout=self._poll_interval_s)
            except ray.exceptions.GetTimeoutError:
                self._raise_first_failure(refs, ranks, method_name, probed)
            except Exception as e:
                self._raise_first_failure(refs, ranks, method_name, set())
                raise WorkerError(
                    f"`{method_name}` failed: {type(e).__name__}: {e}", ranks[0], method_name
                ) from e

    def _raise_first_failure(self, refs: list, ranks: list[int], method_name: str, probed: set) -> None:
        """Raise the mapped error of the first finished-with-error result; ``probed`` refs are skipped
        (and newly looked-at ones added) so a large finished result is not fetched again every poll."""
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0, fetch_local=False)
        ready_set = set(ready) - probed
        for ref, rank in zip(refs, ranks):
            if ref not in ready_set:
                continue
            probed.add(ref)
            try:
                ray.get(ref)
            except Exception as e:
                raise self._map_error(e, rank, method_name) from e

    def _describe(self, rank: int) -> str:
        info = self._worker_info[rank]
        return (
            f"worker rank {rank} of worker group {self.name_prefix.rstrip('_')} "
            f"({self._actor_cls_name}, pid {info['pid']} on {info['node_ip']})"
        )

    def _map_error(self, error: Exception, rank: int, method_name: str) -> Exception:
        who = self._describe(rank)
        if isinstance(error, ray.exceptions.RayActorError):
            self._dead[rank] = f"{who} died while running `{method_name}`"
            return WorkerDiedError(
                f"{who} died while running `{method_name}`; the worker group cannot continue, start a new one. "
                f"Ray says: {error}",
                rank,
                method_name,
            )
        if isinstance(error, ray.exceptions.RayTaskError):
            cause = error.cause
            # str(error) carries Ray's remote traceback ("ray::Cls.method() (pid=..)" + Traceback ...)
            return WorkerError(
                f"{who} raised {type(cause).__name__} in `{method_name}`: {cause}\nremote traceback:\n{error}",
                rank,
                method_name,
            )
        return WorkerError(
            f"{who} failed in `{method_name}`: {type(error).__name__}: {error}", rank, method_name
        )

    def _check_alive(self, method_name: str) -> None:
        if self._dead:
            rank, how = next(iter(self._dead.items()))
            raise WorkerDiedError(
                f"cannot run `{method_name}`: {how}; the worker group cannot continue, start a new one",
                rank,
                method_name,
            )

    # --- direct calls (upstream API) -------------------------------------------------------------

    def execute_all_async(self, method_name: str, *args: Any, **kwargs: Any) -> list:
        """Call ``method_name`` on every worker; list arguments of length world_size are scattered."""
        return self._submit(method_name, args, kwargs, rank_zero=False, scatter=True)[0]

    def execute_all_sync(self, method_name: str, *args: Any, **kwargs: Any) -> list:
        refs, ranks = self._submit(method_name, args, kwargs, rank_zero=False, scatter=True)
        return self._resolve(refs, ranks, method_name)

    def execute_all(self, method_name: str, *args: Any, **kwargs: Any) -> list:
        return self.execute_all_sync(method_name, *args, **kwargs)

    def execute_rank_zero_async(self, method_name: str, *args: Any, **kwargs: Any):
        return self._submit(method_name, args, kwargs, rank_zero=True, scatter=False)[0][0]

    def execute_rank_zero_sync(self, method_name: str, *args: Any, **kwargs: Any):
        refs, ranks = self._submit(method_name, args, kwargs, rank_zero=True, scatter=False)
        return self._resolve(refs, ranks, method_name)[0]

    def execute_rank_zero(self, method_name: str, *args: Any, **kwargs: Any):
        return self.execute_rank_zero_sync(method_name, *args, **kwargs)

    # --- colocation views ------------------------------------------------------------------------

    def spawn(self, prefix_set) -> dict[str, RayWorkerGroup]:
        """Per-role views of a group built from ``create_colocated_worker_cls``: ``{role: group}``.

        A view shares the actors and binds the role's methods under their own names.
        """
        user_cls = self.ray_cls_with_init.user_cls
        if not issubclass(user_cls, FusedWorker):
            raise TypeError(
                f"spawn/fuse need a group of colocated roles (create_colocated_worker_cls); "
                f"this group runs {user_cls.__name__}"
            )
        roles = user_cls.raw_cls_dict
        views = {}
        for role in prefix_set:
            if role not in roles:
                raise KeyError(f"no role {role!r} in this colocated worker group; roles: {', '.join(roles)}")
            role_cls = roles[role]
            view = object.__new__(type(self))
            WorkerGroup.__init__(view, resource_pool=self.resource_pool)
            for key in (
                "ray_cls_with_init",
                "resource_pool",
                "name_prefix",
                "customized_worker_env",
                "_poll_interval_s",
                "_worker_info",
                "_dead",
                "_method_handles",
                "_workers",
                "_worker_names",
                "_master_addr",
                "_master_port",
            ):
                setattr(view, key, getattr(self, key))
            view._actor_cls_name = f"{self._actor_cls_name}[{role}]"
            methods = {
                name: (f"{role}_{name}", attrs) for name, attrs in registered_methods(role_cls).items()
            }
            view._bind_methods(role_cls, methods)
            views[role] = view
        return views

    def fuse(self, prefix_set) -> None:
        """Attach a per-role view of this colocated group as an attribute per role (upstream's API):
        after ``wg.fuse(["actor", "critic"])``, ``wg.actor.update_policy(data)`` runs the actor role."""
        views = self.spawn(prefix_set)
        for role in views:
            if role in dir(type(self)) or role in self._method_attrs:
                raise ValueError(f"cannot fuse role {role!r}: the worker group already has an attribute of that name")
        for role, view in views.items():
            setattr(self, role, view)


def _check_worker_env(worker_env: dict[str, str] | None) -> dict[str, str]:
    env = dict(worker_env or {})
    taken = sorted(set(env) & set(PROTECTED_WORKER_ENV))
    if taken:
        raise ValueError(
            f"worker_env cannot override {taken}: the worker group sets them for torch.distributed and its own "
            f"bookkeeping (protected: {', '.join(PROTECTED_WORKER_ENV)})"
        )
    bad = {k: v for k, v in env.items() if not (isinstance(k, str) and isinstance(v, str))}
    if bad:
        raise ValueError(f"worker_env must map str to str (environment variables), got {bad!r}")
    return env


# ---------------------------------------------------------------------------------------------------
# Colocation: several roles in one process (the fused class lives in base.colocation)


def create_colocated_worker_cls(class_dict: dict[str, RayClassWithInitArgs]) -> RayClassWithInitArgs:
    """One worker class running every role of ``class_dict`` in the same process.

    Role ``r``'s registered method ``m`` becomes ``r_m`` on the combined class; build a
    ``RayWorkerGroup`` from the result and call ``spawn(prefix_set=class_dict.keys())`` for per-role
    views, or ``fuse(prefix_set)`` to reach them as ``group.<role>``. The roles' Ray options merge.
    """
    cia = RayClassWithInitArgs(cls=create_colocated_worker_raw_cls(class_dict))
    for role_cia in class_dict.values():
        cia.update_options(role_cia._options)
    return cia


def create_colocated_worker_cls_fused(class_dict: dict[str, RayClassWithInitArgs]) -> RayClassWithInitArgs:
    """Upstream's name for the fused-worker variant; here it is the one colocated class above."""
    return create_colocated_worker_cls(class_dict)
