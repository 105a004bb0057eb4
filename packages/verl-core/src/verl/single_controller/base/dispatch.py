"""Dispatch modes: how a worker-group call's arguments are split across workers and how the results
come back (upstream's ``Dispatch``/``Execute`` and their functions).

``dispatch_fn(worker_group, *args, **kwargs) -> (args, kwargs)`` turns the driver's arguments into one
value per worker (each returned arg is a list of length ``world_size``); ``collect_fn(worker_group,
outputs) -> result`` combines what the workers returned. ``Dispatch`` and ``Execute`` are extensible
enums; ``register_dispatch_mode(name, dispatch_fn, collect_fn)`` adds a mode (a taken name is an error;
an unknown name lists the known ones). The ``MEGATRON_*`` modes build on the helpers here and live in
``verl.single_controller.base.megatron_dispatch``; ``verl.single_controller.base.decorator`` imports
both, so importing it registers every predefined mode.

This module never imports Ray: it only recognises Ray futures when Ray is already loaded.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from verl.protocol import DataProto, DataProtoFuture, pad_dataproto_to_divisor, unpad_dataproto
from verl.utils.registry import Registry

# Key a dispatch function uses to tell the group how many padding rows to drop from the result.
_padding_size_key = "_padding_size_key_x123d"


class _DynamicEnumMeta(type):
    _registry: dict[str, Any]

    def __getattr__(cls, name: str) -> DynamicEnum:
        registry = cls.__dict__.get("_registry")
        if registry is None or name.startswith("__"):
            raise AttributeError(name)
        try:
            return registry[name]
        except KeyError:
            raise AttributeError(
                f"{cls.__name__} has no member {name!r}; known: {', '.join(registry)}"
            ) from None

    def __iter__(cls):
        return iter(list(cls._registry.values()))

    def __contains__(cls, item: object) -> bool:
        return isinstance(item, cls) and cls._registry.get(item.name) is item

    def __len__(cls) -> int:
        return len(cls._registry)


class DynamicEnum(metaclass=_DynamicEnumMeta):
    """An enum whose members can be added at run time with ``register(name)``."""

    _registry: dict[str, DynamicEnum]
    _next_value: int

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._registry = {}
        cls._next_value = 0

    def __init__(self, name: str, value: int):
        self.name = name
        self.value = value

    def __repr__(self) -> str:
        return f"<{type(self).__name__}.{self.name}: {self.value}>"

    def __reduce__(self):
        # Members travel to workers inside decorated functions; resolve by name there so identity holds
        # (and a mode registered only on the driver still unpickles).
        return (type(self)._get_or_add, (self.name,))

    @classmethod
    def register(cls, name: str) -> DynamicEnum:
        if name in cls._registry:
            raise ValueError(f"{cls.__name__}.{name} already exists; pick another name")
        member = cls(name, cls._next_value)
        cls._next_value += 1
        cls._registry[name] = member
        return member

    @classmethod
    def remove(cls, name: str) -> DynamicEnum:
        return cls._registry.pop(name)

    @classmethod
    def get(cls, name: str) -> DynamicEnum:
        try:
            return cls._registry[name]
        except KeyError:
            raise KeyError(f"unknown {cls.__name__} {name!r}; known: {', '.join(cls._registry)}") from None

    @classmethod
    def _get_or_add(cls, name: str) -> DynamicEnum:
        return cls._registry[name] if name in cls._registry else cls.register(name)


class Dispatch(DynamicEnum):
    """How a call's arguments are split across workers (see ``register_dispatch_mode``)."""


class Execute(DynamicEnum):
    """Which workers run a call: ``ALL`` or ``RANK_ZERO``."""


Execute.register("ALL")
Execute.register("RANK_ZERO")


@dataclass(frozen=True)
class DispatchModeFns:
    dispatch_fn: Callable[..., tuple[tuple, dict]]
    collect_fn: Callable[[Any, list], Any]


DISPATCH_MODES: Registry[DispatchModeFns] = Registry("dispatch mode")


def register_dispatch_mode(dispatch_mode_name: str, dispatch_fn: Callable, collect_fn: Callable) -> DynamicEnum:
    """Add ``Dispatch.<dispatch_mode_name>`` with its dispatch and collect functions."""
    DISPATCH_MODES.register(dispatch_mode_name, DispatchModeFns(dispatch_fn, collect_fn))
    if dispatch_mode_name in Dispatch._registry:  # added by unpickling before its functions were known
        return Dispatch.get(dispatch_mode_name)
    return Dispatch.register(dispatch_mode_name)


def update_dispatch_mode(dispatch_mode: Dispatch, dispatch_fn: Callable, collect_fn: Callable) -> None:
    """Replace the functions of an existing mode."""
    DISPATCH_MODES.get(dispatch_mode.name)  # unknown -> error listing the known modes
    DISPATCH_MODES.unregister(dispatch_mode.name)
    DISPATCH_MODES.register(dispatch_mode.name, DispatchModeFns(dispatch_fn, collect_fn))


def get_predefined_dispatch_fn(dispatch_mode: DynamicEnum | str) -> dict[str, Callable]:
    name = dispatch_mode if isinstance(dispatch_mode, str) else dispatch_mode.name
    fns = DISPATCH_MODES.get(name)
    return {"dispatch_fn": fns.dispatch_fn, "collect_fn": fns.collect_fn}


def get_predefined_execute_fn(execute_mode: DynamicEnum) -> dict[str, str]:
    names = {"ALL": "execute_all", "RANK_ZERO": "execute_rank_zero"}
    return {"execute_fn_name": names[execute_mode.name]}


# ----------------------------------------------------------------------------------------------
# Dispatch and collect functions. ``wg`` is the worker group (needs ``world_size``).


def _is_future_list(outputs: list) -> bool:
    ray = sys.modules.get("ray")
    return ray is not None and len(outputs) > 0 and isinstance(outputs[0], ray.ObjectRef)


def dispatch_one_to_all(wg, *args, **kwargs):
    n = wg.world_size
    return tuple([a] * n for a in args), {k: [v] * n for k, v in kwargs.items()}


def dispatch_all_to_all(wg, *args, **kwargs):
    return args, kwargs


def collect_all_to_all(wg, outputs: list) -> list:
    return outputs


def collect_rank_zero(wg, outputs: list) -> Any:
    return outputs[0]


def dispatch_dp_compute(wg, *args, **kwargs):
    n = wg.world_size
    named = [(f"argument {i}", a) for i, a in enumerate(args)] + [
        (f"argument {k!r}", v) for k, v in kwargs.items()
    ]
    for what, value in named:
        if not isinstance(value, (list, tuple)) or len(value) != n:
            got = (
                f"{type(value).__name__} of length {len(value)}"
                if isinstance(value, (list, tuple))
                else type(value).__name__
            )
            raise ValueError(
                f"Dispatch.DP_COMPUTE gives worker i the i-th item of every argument, so each must be a list of "
                f"length world_size={n}; {what} is a {got}"
            )
    return args, kwargs


def collect_dp_compute(wg, outputs: list) -> list:
    return outputs


def _split_data_protos(mode: str, chunks: int, args: tuple, kwargs: dict, pad: bool = True):
    """Split every DataProto / DataProtoFuture argument into ``chunks`` pieces.

    DataProtos whose length is not a multiple of ``chunks`` are padded (rows repeated from the start);
    the padding size is returned so the collected result can be cut back.
    """
    named = [(f"argument {i}", a) for i, a in enumerate(args)] + [
        (f"argument {k!r}", v) for k, v in kwargs.items()
    ]
    lengths = {}
    for what, value in named:
        if isinstance(value, DataProtoFuture):
            continue
        if not isinstance(value, DataProto):
            raise TypeError(
                f"Dispatch.{mode} splits every argument across {chunks} workers, so each must be a DataProto or "
                f"DataProtoFuture; {what} is a {type(value).__name__}. Put plain values in meta_info or use "
                f"another dispatch mode"
            )
        lengths[what] = len(value)
    if len(set(lengths.values())) > 1:
        sizes = ", ".join(f"{w}: {n} rows" for w, n in lengths.items())
        raise ValueError(
            f"Dispatch.{mode} needs DataProto arguments of one length to split them alike; got {sizes}"
        )
    if any(n == 0 for n in lengths.values()):
        raise ValueError(f"Dispatch.{mode} cannot split an empty DataProto (0 rows) across {chunks} workers")

    padding = 0

    def split(value):
        nonlocal padding
        if isinstance(value, DataProtoFuture):
            return value.chunk(chunks)
        if len(value) % chunks != 0:
            if not pad:
                raise ValueError(
                    f"Dispatch.{mode}: a DataProto of {len(value)} rows cannot be split evenly into {chunks} chunks"
                )
            value, padding = pad_dataproto_to_divisor(value, chunks)
        return value.chunk(chunks)

    out_args = tuple(split(a) for a in args)
    out_kwargs = {k: split(v) for k, v in kwargs.items()}
    if padding:
        out_kwargs[_padding_size_key] = padding
    return out_args, out_kwargs


def dispatch_dp_compute_data_proto(wg, *args, **kwargs):
    return _split_data_protos("DP_COMPUTE_PROTO", wg.world_size, args, kwargs)


def dispatch_dp_compute_data_proto_with_func(wg, *args, **kwargs):
    if not args or not callable(args[0]):
        raise TypeError(
            "Dispatch.DP_COMPUTE_PROTO_WITH_FUNC expects a function as the first argument (sent to every worker), "
            f"then DataProtos; got {type(args[0]).__name__ if args else 'no arguments'}"
        )
    fn_list = [args[0]] * wg.world_size
    split_args, split_kwargs = _split_data_protos(
        "DP_COMPUTE_PROTO_WITH_FUNC", wg.world_size, args[1:], kwargs
    )
    return (fn_list, *split_args), split_kwargs


def _concat_outputs(outputs: list) -> DataProto:
    for i, o in enumerate(outputs):
        if not isinstance(o, DataProto):
            raise TypeError(
                f"a DataProto-collecting dispatch mode expects every worker to return a DataProto; "
                f"output {i} is a {type(o).__name__}"
            )
    return DataProto.concat(outputs)


def collect_dp_compute_data_proto(wg, outputs: list):
    if _is_future_list(outputs):
        return DataProtoFuture.concat(outputs)
    return _concat_outputs(outputs)


def _concat_and_unpad(outputs: list, pad_size: int) -> DataProto:
    return unpad_dataproto(_concat_outputs(outputs), pad_size=pad_size)


def remove_padding(output: Any, pad_size: int) -> Any:
    """Cut ``pad_size`` trailing rows (the dispatch padding) from a collected result."""
    if pad_size <= 0:
        return output
    if isinstance(output, DataProto):
        return unpad_dataproto(output, pad_size=pad_size)
    if isinstance(output, DataProtoFuture):
        return DataProtoFuture(
            collect_fn=functools.partial(_concat_and_unpad, pad_size=pad_size), futures=output.futures
        )
    if isinstance(output, list):
        return output[:-pad_size]
    return output


# --- mesh-based dispatch: each worker declares its data-parallel rank in a named mesh ----------


def _mesh_info(wg, mesh_name: str) -> tuple[list[int], list[bool]]:
    return wg._query_mesh_info(mesh_name)


def dispatch_nd_compute_dataproto(mesh_name: str, wg, *args, **kwargs):
    dp_ranks, _ = _mesh_info(wg, mesh_name)
    dp_size = max(dp_ranks) + 1
    split_args, split_kwargs = _split_data_protos(f"nd_compute({mesh_name!r})", dp_size, args, kwargs)
    pad = split_kwargs.pop(_padding_size_key, 0)
    out_args = tuple([chunks[r] for r in dp_ranks] for chunks in split_args)
    out_kwargs = {k: [chunks[r] for r in dp_ranks] for k, chunks in split_kwargs.items()}
    if pad:
        out_kwargs[_padding_size_key] = pad
    return out_args, out_kwargs


def collect_nd_compute_dataproto(mesh_name: str, wg, outputs: list):
    dp_ranks, is_collect = _mesh_info(wg, mesh_name)
    picked_by_dp = sorted((r, i) for i, (r, c) in enumerate(zip(dp_ranks, is_collect)) if c)
    picked_ranks = [r for r, _ in picked_by_dp]
    if picked_ranks != list(range(max(dp_ranks) + 1)):
        raise ValueError(
            f"mesh {mesh_name!r}: exactly one worker per data-parallel rank must be marked is_collect; "
            f"the collecting workers have dp ranks {picked_ranks}"
        )
    picked = [outputs[i] for _, i in picked_by_dp]
    if _is_future_list(picked):
        return DataProtoFuture.concat(picked)
    return _concat_outputs(picked)


def make_nd_compute_dataproto_dispatch_fn(mesh_name: str) -> dict[str, Callable]:
    """A dispatch mode for engines with tensor/pipeline parallelism.

    Each worker calls ``self._register_dispatch_collect_info(mesh_name, dp_rank, is_collect)``; the data
    is split into (max dp_rank + 1) chunks, worker i gets the chunk of its dp rank, and the result is
    the concat of the outputs of the workers marked ``is_collect``, in dp-rank order.
    """
    return {
        "dispatch_fn": functools.partial(dispatch_nd_compute_dataproto, mesh_name),
        "collect_fn": functools.partial(collect_nd_compute_dataproto, mesh_name),
    }


register_dispatch_mode("RANK_ZERO", dispatch_one_to_all, collect_rank_zero)
register_dispatch_mode("ONE_TO_ALL", dispatch_one_to_all, collect_all_to_all)
register_dispatch_mode("ALL_TO_ALL", dispatch_all_to_all, collect_all_to_all)
register_dispatch_mode("DP_COMPUTE", dispatch_dp_compute, collect_dp_compute)
register_dispatch_mode("DP_COMPUTE_PROTO", dispatch_dp_compute_data_proto, collect_dp_compute_data_proto)
register_dispatch_mode(
    "DP_COMPUTE_PROTO_WITH_FUNC", dispatch_dp_compute_data_proto_with_func, collect_dp_compute_data_proto
)
register_dispatch_mode("DP_COMPUTE_METRIC", dispatch_dp_compute_data_proto, collect_dp_compute)
