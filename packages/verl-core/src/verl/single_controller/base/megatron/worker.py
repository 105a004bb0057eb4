"""``MegatronWorker``: a worker that tells the single controller its place in a Megatron layout."""

from __future__ import annotations

from dataclasses import dataclass

from verl.single_controller.base.decorator import Dispatch, register
from verl.single_controller.base.worker import Worker


@dataclass(frozen=True)
class DistRankInfo:
    """This worker's tensor / data / pipeline / context parallel ranks."""

    tp_rank: int
    dp_rank: int
    pp_rank: int
    cp_rank: int


@dataclass(frozen=True)
class DistGlobalInfo:
    """The group's tensor / data / pipeline / context parallel sizes."""

    tp_size: int
    dp_size: int
    pp_size: int
    cp_size: int


class MegatronWorker(Worker):
    """Base of workers whose methods use the ``MEGATRON_*`` dispatch modes.

    A subclass calls :meth:`_register_megatron_rank_info` once its process groups exist (in
    ``init_model``); the worker group asks for it at the first ``MEGATRON_*`` call.
    """

    def __init__(self, cuda_visible_devices: str | None = None):
        super().__init__(cuda_visible_devices)
        self._megatron_rank_info: DistRankInfo | None = None
        self._megatron_global_info: DistGlobalInfo | None = None

    def _register_megatron_rank_info(self, rank_info: DistRankInfo, global_info: DistGlobalInfo) -> None:
        for name, value, size in (("tp", rank_info.tp_rank, global_info.tp_size),
                                  ("dp", rank_info.dp_rank, global_info.dp_size),
                                  ("pp", rank_info.pp_rank, global_info.pp_size),
                                  ("cp", rank_info.cp_rank, global_info.cp_size)):
            if not 0 <= value < size:
                raise ValueError(f"worker rank {self.rank}: {name}_rank={value} is outside {name}_size={size}")
        if self._megatron_rank_info is not None and (rank_info, global_info) != (
            self._megatron_rank_info, self._megatron_global_info
        ):
            raise ValueError(
                f"worker rank {self.rank} already registered Megatron rank {self._megatron_rank_info} of "
                f"{self._megatron_global_info}; got {rank_info} of {global_info}"
            )
        self._megatron_rank_info = rank_info
        self._megatron_global_info = global_info

    def get_megatron_rank_info(self) -> DistRankInfo | None:
        return self._megatron_rank_info

    def get_megatron_global_info(self) -> DistGlobalInfo | None:
        return self._megatron_global_info

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def _query_megatron_rank_info(self) -> tuple[DistRankInfo, DistGlobalInfo | None] | None:
        if self._megatron_rank_info is None:
            return None
        return self._megatron_rank_info, self._megatron_global_info
