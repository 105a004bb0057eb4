"""How a worker-group call is split across workers and how the results come back.

``@register(dispatch_mode=..., execute_mode=...)`` marks a worker method for the single controller.
When a worker group is built, every marked method is bound onto the group as one callable that

1. *dispatches*: ``dispatch_fn(worker_group, *args, **kwargs) -> (args, kwargs)`` turns the driver's
   arguments into one value per worker (each returned arg is a list of length ``world_size``),
2. *executes* the method on all workers (``Execute.ALL``) or on rank 0 (``Execute.RANK_ZERO``),
3. *collects*: ``collect_fn(worker_group, outputs) -> result``.

``Dispatch`` and ``Execute`` are extensible enums; ``register_dispatch_mode(name, dispatch_fn,
collect_fn)`` adds a mode (a taken name is an error; an unknown name lists the known ones). A mode can
also be given inline as ``{"dispatch_fn": ..., "collect_fn": ...}``, which is what
``make_nd_compute_dataproto_dispatch_fn(mesh_name)`` returns. The ``MEGATRON_*`` modes (data to the
data-parallel ranks, results from the last pipeline stage's tensor rank 0) are in
``verl.single_controller.base.megatron_dispatch``.

This module never imports Ray: it only recognises Ray futures when Ray is already loaded.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable

from verl.protocol import DataProtoFuture

# Importing megatron_dispatch registers the MEGATRON_* modes, so every predefined mode exists once this
# module is imported.
from verl.single_controller.base import megatron_dispatch as _megatron_dispatch  # noqa: F401
from verl.single_controller.base.dispatch import (
    DISPATCH_MODES,
    Dispatch,
    DispatchModeFns,
    DynamicEnum,
    Execute,
    collect_all_to_all,
    collect_dp_compute,
    collect_dp_compute_data_proto,
    collect_nd_compute_dataproto,
    collect_rank_zero,
    dispatch_all_to_all,
    dispatch_dp_compute,
    dispatch_dp_compute_data_proto,
    dispatch_dp_compute_data_proto_with_func,
    dispatch_nd_compute_dataproto,
    dispatch_one_to_all,
    get_predefined_dispatch_fn,
    get_predefined_execute_fn,
    make_nd_compute_dataproto_dispatch_fn,
    register_dispatch_mode,
    remove_padding,
    update_dispatch_mode,
)

# Upstream's names: the dispatch machinery is importable from here, as in upstream's decorator module.
__all__ = [
    "DISPATCH_MODES",
    "Dispatch",
    "DispatchModeFns",
    "DynamicEnum",
    "Execute",
    "collect_all_to_all",
    "collect_dp_compute",
    "collect_dp_compute_data_proto",
    "collect_nd_compute_dataproto",
    "collect_rank_zero",
    "dispatch_all_to_all",
    "dispatch_dp_compute",
    "dispatch_dp_compute_data_proto",
    "dispatch_dp_compute_data_proto_with_func",
    "dispatch_nd_compute_dataproto",
    "dispatch_one_to_all",
    "get_predefined_dispatch_fn",
    "get_predefined_execute_fn",
    "make_nd_compute_dataproto_dispatch_fn",
    "register_dispatch_mode",
    "remove_padding",
    "update_dispatch_mode",
    "MAGIC_ATTR",
    "register",
    "registered_methods",
    "resolve_dispatch_mode",
]

# Attribute under which @register stores its settings on the function (upstream's name).
MAGIC_ATTR = "attrs_3141562937"

# ----------------------------------------------------------------------------------------------
# The decorator


def _materialize_futures(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    args = tuple(a.get() if isinstance(a, DataProtoFuture) else a for a in args)
    kwargs = {k: (v.get() if isinstance(v, DataProtoFuture) else v) for k, v in kwargs.items()}
    return args, kwargs


def resolve_dispatch_mode(dispatch_mode: DynamicEnum | str | dict) -> dict[str, Callable]:
    """``{"dispatch_fn", "collect_fn"}`` for a Dispatch member, its name, or an inline dict."""
    if isinstance(dispatch_mode, dict):
        missing = {"dispatch_fn", "collect_fn"} - set(dispatch_mode)
        if missing:
            raise ValueError(
                f"an inline dispatch mode needs keys dispatch_fn and collect_fn; missing {sorted(missing)}"
            )
        return dispatch_mode
    return get_predefined_dispatch_fn(dispatch_mode)


def register(
    dispatch_mode: DynamicEnum | str | dict = Dispatch.ALL_TO_ALL,
    execute_mode: DynamicEnum | str = Execute.ALL,
    blocking: bool = True,
    materialize_futures: bool = True,
):
    """Mark a worker method as callable on a worker group.

    Args:
        dispatch_mode: a ``Dispatch`` member (or its name), or ``{"dispatch_fn", "collect_fn"}``.
        execute_mode: ``Execute.ALL`` (every worker) or ``Execute.RANK_ZERO``.
        blocking: False makes the group call return futures (a ``DataProtoFuture`` for DataProto modes).
        materialize_futures: resolve ``DataProtoFuture`` arguments on the worker before the call.
    """
    if isinstance(dispatch_mode, str):
        dispatch_mode = Dispatch.get(dispatch_mode)
    resolve_dispatch_mode(dispatch_mode)  # fail at decoration time on an unknown mode
    if isinstance(execute_mode, str):
        execute_mode = Execute.get(execute_mode)

    def decorator(func):
        if inspect.iscoroutinefunction(func):

            @functools.wraps(func)
            async def inner(*args, **kwargs):
                if materialize_futures:
                    args, kwargs = _materialize_futures(args, kwargs)
                return await func(*args, **kwargs)

        else:

            @functools.wraps(func)
            def inner(*args, **kwargs):
                if materialize_futures:
                    args, kwargs = _materialize_futures(args, kwargs)
                return func(*args, **kwargs)

        attrs = {"dispatch_mode": dispatch_mode, "execute_mode": execute_mode, "blocking": blocking}
        setattr(inner, MAGIC_ATTR, attrs)
        return inner

    return decorator


def registered_methods(cls: type) -> dict[str, dict]:
    """``{method name: @register settings}`` for every registered method of ``cls`` (incl. inherited)."""
    found = {}
    for name in dir(cls):
        attr = inspect.getattr_static(cls, name, None)
        attrs = getattr(attr, MAGIC_ATTR, None)
        if isinstance(attrs, dict):
            found[name] = attrs
    return found
