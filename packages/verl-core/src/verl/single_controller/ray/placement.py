"""Where workers run on Ray: ``RayResourcePool`` reserves the placement-group bundles (CPU-only or
CPU+GPU), ``RayClassWithInitArgs`` starts one actor in a bundle, and the colocated class runs several roles
in one process. ``verl.single_controller.ray.base`` builds worker groups on them.
"""

from __future__ import annotations

import uuid
from typing import Any

import ray
from ray.util.placement_group import PlacementGroup, placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from verl.single_controller.base import ClassWithInitArgs, ResourcePool
from verl.single_controller.base.colocation import create_colocated_worker_raw_cls

__all__ = [
    "PLACEMENT_GROUP_TIMEOUT_S",
    "RayClassWithInitArgs",
    "RayResourcePool",
    "create_colocated_worker_cls",
    "create_colocated_worker_cls_fused",
]

PLACEMENT_GROUP_TIMEOUT_S = 120.0


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
