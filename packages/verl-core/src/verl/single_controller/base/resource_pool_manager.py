"""Named resource pools and which role runs on which pool (the trainer builds one of these).

A description until the Ray backend asks for its pools: only ``create_resource_pool`` imports Ray, so
``trainer.worker_backend=local`` builds and carries one without Ray installed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class ResourcePoolManager:
    """Named resource pools and which role runs on which pool.

    ``resource_pool_spec``: ``{pool name: process_on_nodes}``; ``mapping``: ``{role: pool name}``.
    """

    resource_pool_spec: dict[str, list[int]]
    mapping: dict[Any, str]
    resource_pool_dict: dict[str, Any] = field(default_factory=dict)  # name -> RayResourcePool
    use_gpu: bool = True
    max_colocate_count: int = 1
    num_cpus_per_worker: float = 1.0

    def __post_init__(self) -> None:
        for role, pool in self.mapping.items():
            if pool not in self.resource_pool_spec:
                raise ValueError(
                    f"role {role!r} maps to resource pool {pool!r}, which is not in resource_pool_spec "
                    f"(pools: {', '.join(self.resource_pool_spec)})"
                )

    def create_resource_pool(self) -> None:
        from verl.single_controller.ray.placement import RayResourcePool

        for name, process_on_nodes in self.resource_pool_spec.items():
            self.resource_pool_dict[name] = RayResourcePool(
                process_on_nodes=process_on_nodes,
                use_gpu=self.use_gpu,
                max_colocate_count=self.max_colocate_count,
                name_prefix=name,
                num_cpus_per_worker=self.num_cpus_per_worker,
            )

    def get_resource_pool(self, role: Any) -> Any:
        if role not in self.mapping:
            raise KeyError(
                f"no resource pool for role {role!r}; mapped roles: {', '.join(map(str, self.mapping))}"
            )
        if not self.resource_pool_dict:
            self.create_resource_pool()
        return self.resource_pool_dict[self.mapping[role]]

    def get_n_gpus(self) -> int:
        return sum(sum(nodes) for nodes in self.resource_pool_spec.values()) if self.use_gpu else 0
