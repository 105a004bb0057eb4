"""Dispatch modes for Megatron workers (upstream's names), registered in core's dispatch registry.

Each worker of the group is a ``MegatronWorker`` that declared its ``(tp, dp, pp, cp)`` ranks; the
group asks once (``WorkerGroup._query_megatron_info``). With ``dp`` data-parallel ranks:

- ``MEGATRON_COMPUTE``: each argument is a list of ``dp`` values; every worker gets the value of its dp
  rank (all TP/PP/CP ranks of one dp rank see the same data). The result is the list of outputs of
  the workers with ``tp_rank == 0``, the last ``pp_rank`` and ``cp_rank == 0``, in dp order.
- ``MEGATRON_COMPUTE_PROTO``: every ``DataProto`` argument is split into ``dp`` chunks (padded when
  needed, the padding cut from the result) and dispatched as above; the outputs are concatenated.
- ``MEGATRON_PP_AS_DP``: the pipeline ranks count as data-parallel ranks too (for work every rank
  can do on its own, e.g. generation with a full model copy): lists of ``pp * dp * cp`` values, worker
  ``(dp, pp, cp)`` gets item ``(cp * dp_size + dp) * pp_size + pp``; collected from ``tp_rank == 0``
  in that order. ``MEGATRON_PP_AS_DP_PROTO`` splits ``DataProto`` arguments into that many chunks.
- ``MEGATRON_PP_ONLY``: every worker gets the arguments; collected from ``tp_rank == 0`` and
  ``dp_rank == 0``, one output per pipeline stage (e.g. per-stage parameter names).
"""

from __future__ import annotations

from typing import Any

from verl.protocol import DataProtoFuture
from verl.single_controller.base.dispatch import (
    _concat_outputs,
    _is_future_list,
    _padding_size_key,
    _split_data_protos,
    dispatch_one_to_all,
    register_dispatch_mode,
)


def _infos(wg) -> list:
    return wg._query_megatron_info()


def _check_lists(mode: str, n: int, args: tuple, kwargs: dict) -> None:
    named = [(f"argument {i}", a) for i, a in enumerate(args)] + [(f"argument {k!r}", v) for k, v in kwargs.items()]
    for what, value in named:
        if not isinstance(value, (list, tuple)) or len(value) != n:
            got = f"{type(value).__name__} of length {len(value)}" if isinstance(value, (list, tuple)) else type(value).__name__
            raise ValueError(f"Dispatch.{mode} needs every argument as a list of {n} values; {what} is a {got}")


def _pick(args: tuple, kwargs: dict, index: list[int]) -> tuple[tuple, dict]:
    return tuple([a[i] for i in index] for a in args), {k: [v[i] for i in index] for k, v in kwargs.items()}


def _pp_as_dp_index(rank, glob) -> int:
    return (rank.cp_rank * glob.dp_size + rank.dp_rank) * glob.pp_size + rank.pp_rank


def dispatch_megatron_compute(wg, *args, **kwargs):
    infos = _infos(wg)
    glob = infos[0][1]
    _check_lists("MEGATRON_COMPUTE", glob.dp_size, args, kwargs)
    return _pick(args, kwargs, [rank.dp_rank for rank, _ in infos])


def collect_megatron_compute(wg, outputs: list) -> list:
    infos = _infos(wg)
    picked = sorted(
        (rank.dp_rank, i) for i, (rank, glob) in enumerate(infos)
        if rank.tp_rank == 0 and rank.pp_rank == glob.pp_size - 1 and rank.cp_rank == 0
    )
    return [outputs[i] for _, i in picked]


def _concat(outputs: list):
    if _is_future_list(outputs):
        return DataProtoFuture.concat(outputs)
    return _concat_outputs(outputs)


def _split_and_pick(mode: str, chunks: int, index: list[int], args: tuple, kwargs: dict):
    split_args, split_kwargs = _split_data_protos(mode, chunks, args, kwargs)
    pad = split_kwargs.pop(_padding_size_key, 0)
    out_args, out_kwargs = _pick(split_args, split_kwargs, index)
    if pad:
        out_kwargs[_padding_size_key] = pad
    return out_args, out_kwargs


def dispatch_megatron_compute_data_proto(wg, *args, **kwargs):
    infos = _infos(wg)
    return _split_and_pick("MEGATRON_COMPUTE_PROTO", infos[0][1].dp_size, [r.dp_rank for r, _ in infos], args, kwargs)


def collect_megatron_compute_data_proto(wg, outputs: list):
    return _concat(collect_megatron_compute(wg, outputs))


def dispatch_megatron_pp_as_dp(wg, *args, **kwargs):
    infos = _infos(wg)
    glob = infos[0][1]
    _check_lists("MEGATRON_PP_AS_DP", glob.pp_size * glob.dp_size * glob.cp_size, args, kwargs)
    return _pick(args, kwargs, [_pp_as_dp_index(rank, glob) for rank, glob in infos])


def collect_megatron_pp_as_dp(wg, outputs: list) -> list:
    infos = _infos(wg)
    picked = sorted((_pp_as_dp_index(rank, glob), i) for i, (rank, glob) in enumerate(infos) if rank.tp_rank == 0)
    return [outputs[i] for _, i in picked]


def dispatch_megatron_pp_as_dp_data_proto(wg, *args, **kwargs):
    infos = _infos(wg)
    glob = infos[0][1]
    index = [_pp_as_dp_index(rank, g) for rank, g in infos]
    return _split_and_pick("MEGATRON_PP_AS_DP_PROTO", glob.pp_size * glob.dp_size * glob.cp_size, index, args, kwargs)


def collect_megatron_pp_as_dp_data_proto(wg, outputs: list):
    return _concat(collect_megatron_pp_as_dp(wg, outputs))


def collect_megatron_pp_only(wg, outputs: list) -> list:
    infos = _infos(wg)
    picked = sorted((rank.pp_rank, i) for i, (rank, _) in enumerate(infos) if rank.tp_rank == 0 and rank.dp_rank == 0)
    return [outputs[i] for _, i in picked]


def _register_all() -> None:
    modes: dict[str, tuple[Any, Any]] = {
        "MEGATRON_COMPUTE": (dispatch_megatron_compute, collect_megatron_compute),
        "MEGATRON_PP_AS_DP": (dispatch_megatron_pp_as_dp, collect_megatron_pp_as_dp),
        "MEGATRON_PP_ONLY": (dispatch_one_to_all, collect_megatron_pp_only),
        "MEGATRON_COMPUTE_PROTO": (dispatch_megatron_compute_data_proto, collect_megatron_compute_data_proto),
        "MEGATRON_PP_AS_DP_PROTO": (dispatch_megatron_pp_as_dp_data_proto, collect_megatron_pp_as_dp_data_proto),
    }
    for name, (dispatch_fn, collect_fn) in modes.items():
        register_dispatch_mode(name, dispatch_fn, collect_fn)


_register_all()
