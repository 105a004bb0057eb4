"""Backend-neutral pieces of a worker group: resources, deferred construction, method binding.

A ``WorkerGroup`` turns every ``@register``-ed method of its worker class into one group-level
callable (dispatch -> execute -> collect, see ``decorator``). Backends (``verl.single_controller.ray``)
implement ``_execute`` (run a method on the chosen workers and return their outputs or futures).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from verl.single_controller.base.decorator import (
    Dispatch,
    Execute,
    registered_methods,
    resolve_dispatch_mode,
)
from verl.single_controller.base.dispatch import _padding_size_key, remove_padding


class ResourcePool:
    """How many worker processes to run on each node (``process_on_nodes[i]`` on node i)."""

    def __init__(
        self,
        process_on_nodes: list[int] | None = None,
        max_colocate_count: int = 10,
        n_gpus_per_node: int = 8,
    ):
        process_on_nodes = list(process_on_nodes or [])
        for i, n in enumerate(process_on_nodes):
            if not isinstance(n, int) or n <= 0:
                raise ValueError(
                    f"process_on_nodes[{i}] must be a positive int (processes on node {i}), got {n!r}"
                )
        if max_colocate_count < 1:
            raise ValueError(f"max_colocate_count must be >= 1, got {max_colocate_count}")
        self._store = process_on_nodes
        self.max_colocate_count = max_colocate_count
        self.n_gpus_per_node = n_gpus_per_node

    def add_node(self, process_count: int) -> None:
        self._store.append(process_count)

    @property
    def world_size(self) -> int:
        return sum(self._store)

    @property
    def store(self) -> list[int]:
        return self._store

    def __call__(self) -> list[int]:
        return self._store

    def local_world_size_list(self) -> list[int]:
        return [n for n in self._store for _ in range(n)]

    def local_rank_list(self) -> list[int]:
        return [i for n in self._store for i in range(n)]


class ClassWithInitArgs:
    """A class plus the arguments to build it with later (in the worker's process)."""

    def __init__(self, cls: type, *args: Any, **kwargs: Any):
        self.cls = cls
        self.args = args
        self.kwargs = kwargs

    def __call__(self) -> Any:
        return self.cls(*self.args, **self.kwargs)


class WorkerGroup:
    """A group of workers called like one object. Backends fill ``_workers`` and implement ``_execute``."""

    def __init__(self, resource_pool: ResourcePool | None, **kwargs: Any):
        self._is_init_with_detached_workers = resource_pool is None
        self._workers: list[Any] = []
        self._worker_names: list[str] = []
        self._method_attrs: dict[str, dict] = {}  # group method name -> @register settings
        self._worker_cls: type | None = None
        self._mesh_info: dict[str, tuple[list[int], list[bool]]] = {}
        self._megatron_info: list | None = None

    @property
    def world_size(self) -> int:
        return len(self._workers)

    def _execute(self, method_name: str, args: tuple, kwargs: dict, rank_zero: bool, blocking: bool) -> list:
        raise NotImplementedError

    def _bind_worker_method(
        self, user_defined_cls: type, func_generator: Callable | None = None
    ) -> list[str]:
        """Bind every registered method of ``user_defined_cls`` onto this group under its own name."""
        methods = {name: (name, attrs) for name, attrs in registered_methods(user_defined_cls).items()}
        return self._bind_methods(user_defined_cls, methods, func_generator)

    def _bind_methods(
        self, worker_cls: type, methods: dict[str, tuple[str, dict]], func_generator: Callable | None = None
    ) -> list[str]:
        """Bind ``{group method name: (worker method name, @register settings)}`` onto this group.

        ``worker_cls`` is the class whose methods these are (named in errors about unknown methods).
        """
        self._worker_cls = worker_cls
        generator = func_generator or _make_group_method
        for name, (worker_method, attrs) in methods.items():
            if name in dir(type(self)):
                raise ValueError(
                    f"worker method {name!r} of {worker_cls.__name__} clashes with the worker group's own "
                    f"attribute {type(self).__name__}.{name}; rename the method"
                )
            setattr(self, name, generator(self, worker_method, attrs))
            self._method_attrs[name] = attrs
        return list(methods)

    def __getattr__(self, name: str) -> Any:
        # Only reached for names that are not bound: explain unregistered / unknown methods.
        state = self.__dict__
        if name.startswith("__") or "_method_attrs" not in state:
            raise AttributeError(name)
        cls = state.get("_worker_cls")
        known = ", ".join(sorted(n for n in state["_method_attrs"] if not n.startswith("_"))) or "(none)"
        if cls is not None and name in dir(cls):
            raise AttributeError(
                f"{cls.__name__}.{name} is not registered, so it cannot be called on the worker group; decorate "
                f"it with @register(dispatch_mode=...). Registered methods: {known}"
            )
        raise AttributeError(f"{type(self).__name__} has no method {name!r}; registered methods: {known}")

    def _query_mesh_info(self, mesh_name: str) -> tuple[list[int], list[bool]]:
        """Per worker: its dp rank in ``mesh_name`` and whether its output is collected (cached)."""
        if mesh_name not in self._mesh_info:
            dp_ranks = self._query_dispatch_info(mesh_name)
            is_collect = self._query_collect_info(mesh_name)
            missing = [r for r, d in enumerate(dp_ranks) if d is None]
            if missing:
                raise ValueError(
                    f"mesh {mesh_name!r}: worker ranks {missing} never called "
                    f"self._register_dispatch_collect_info({mesh_name!r}, dp_rank, is_collect)"
                )
            dp_size = max(dp_ranks) + 1
            absent = sorted(set(range(dp_size)) - set(dp_ranks))
            if absent:
                raise ValueError(
                    f"mesh {mesh_name!r}: dp ranks {absent} have no worker (ranks per worker: {dp_ranks})"
                )
            self._mesh_info[mesh_name] = (list(dp_ranks), list(is_collect))
        return self._mesh_info[mesh_name]


    def _query_megatron_info(self) -> list:
        """Per worker: ``(DistRankInfo, DistGlobalInfo)`` of a ``MegatronWorker`` group (cached once
        every worker has registered; see ``verl.single_controller.base.megatron``)."""
        if self._megatron_info is None:
            if "_query_megatron_rank_info" not in self._method_attrs:
                name = self._worker_cls.__name__ if self._worker_cls is not None else "this group's worker class"
                raise TypeError(
                    f"the MEGATRON_* dispatch modes need workers that subclass "
                    f"verl.single_controller.base.megatron.MegatronWorker; {name} does not"
                )
            infos = self._query_megatron_rank_info()  # the bound ONE_TO_ALL method: one value per worker
            missing = [r for r, info in enumerate(infos) if info is None]
            if missing:
                raise ValueError(
                    f"worker ranks {missing} have not called _register_megatron_rank_info yet (do it in init_model, "
                    f"before any MEGATRON_* call)"
                )
            sizes = {info[1] for info in infos}
            if len(sizes) != 1:
                raise ValueError(f"the workers disagree on the Megatron layout: {sorted(map(str, sizes))}")
            glob = infos[0][1]
            if glob.tp_size * glob.dp_size * glob.pp_size * glob.cp_size != len(infos):
                raise ValueError(f"Megatron layout {glob} does not have {len(infos)} workers")
            coords = {(r.tp_rank, r.dp_rank, r.pp_rank, r.cp_rank) for r, _ in infos}
            if len(coords) != len(infos):
                raise ValueError("two workers registered the same Megatron (tp, dp, pp, cp) ranks")
            self._megatron_info = infos
        return self._megatron_info


def _make_group_method(wg: WorkerGroup, method_name: str, attrs: dict) -> Callable:
    fns = resolve_dispatch_mode(attrs["dispatch_mode"])
    dispatch_fn, collect_fn = fns["dispatch_fn"], fns["collect_fn"]
    rank_zero = attrs["execute_mode"] is Execute.RANK_ZERO or attrs["dispatch_mode"] is Dispatch.RANK_ZERO
    blocking = attrs["blocking"]

    def group_method(*args, **kwargs):
        args, kwargs = dispatch_fn(wg, *args, **kwargs)
        pad = kwargs.pop(_padding_size_key, 0)
        outputs = wg._execute(method_name, args, kwargs, rank_zero=rank_zero, blocking=blocking)
        return remove_padding(collect_fn(wg, outputs), pad)

    group_method.__name__ = method_name
    return group_method
