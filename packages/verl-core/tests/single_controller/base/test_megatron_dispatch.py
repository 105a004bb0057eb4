"""The MEGATRON_* dispatch modes, run in-process (no Ray, no Megatron) over a group of MegatronWorkers
laid out as Megatron lays ranks out (order tp-cp-dp-pp: tensor rank fastest, pipeline rank slowest)."""

import pytest
import torch
from verl import DataProto
from verl.single_controller.base import Worker
from verl.single_controller.base.decorator import Dispatch, register
from verl.single_controller.base.megatron import DistGlobalInfo, DistRankInfo, MegatronWorker

from .in_process_group import InProcessGroup


def coords(rank: int, tp: int, dp: int, pp: int) -> DistRankInfo:
    return DistRankInfo(tp_rank=rank % tp, dp_rank=(rank // tp) % dp, pp_rank=rank // (tp * dp), cp_rank=0)


class MegaWorker(MegatronWorker):
    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self, tp: int, dp: int, pp: int) -> None:
        self._register_megatron_rank_info(coords(self.rank, tp, dp, pp), DistGlobalInfo(tp, dp, pp, 1))
        self.seen = []

    def _tagged(self, data: DataProto) -> DataProto:
        self.seen.append(data.batch["x"].clone())
        info = self.get_megatron_rank_info()
        n = len(data)
        return DataProto.from_dict(tensors={
            "x": data.batch["x"], "tp": torch.full((n,), info.tp_rank), "pp": torch.full((n,), info.pp_rank),
            "dp": torch.full((n,), info.dp_rank),
        })

    @register(dispatch_mode=Dispatch.MEGATRON_COMPUTE_PROTO)
    def compute(self, data: DataProto) -> DataProto:
        return self._tagged(data)

    @register(dispatch_mode=Dispatch.MEGATRON_PP_AS_DP_PROTO)
    def generate(self, data: DataProto) -> DataProto:
        return self._tagged(data)

    @register(dispatch_mode=Dispatch.MEGATRON_COMPUTE)
    def scale(self, value: int) -> tuple:
        info = self.get_megatron_rank_info()
        return value * 10, info.dp_rank, info.tp_rank, info.pp_rank

    @register(dispatch_mode=Dispatch.MEGATRON_PP_ONLY)
    def stage(self) -> int:
        info = self.get_megatron_rank_info()
        return (info.pp_rank, info.tp_rank, info.dp_rank)


def _group(tp, dp, pp):
    wg = InProcessGroup(MegaWorker, tp * dp * pp)
    wg.init_model(tp, dp, pp)
    return wg


def _rows(n):
    return DataProto.from_dict(tensors={"x": torch.arange(n, dtype=torch.float32) * 1.5})


def test_compute_proto_sends_each_dp_chunk_to_its_tp_pp_ranks_and_collects_last_stage_tp0():
    wg = _group(tp=2, dp=2, pp=2)
    data = _rows(5)  # 5 rows over 2 dp ranks: padded to 6, the padding cut from the result
    out = wg.compute(data)
    assert torch.equal(out.batch["x"], data.batch["x"])
    assert out.batch["tp"].tolist() == [0] * 5 and out.batch["pp"].tolist() == [1] * 5
    assert out.batch["dp"].tolist() == [0, 0, 0, 1, 1]
    # every tensor/pipeline rank of a dp rank got that dp rank's chunk (rows 0-2, or rows 3-4 + 1 padding row)
    for w in wg._workers:
        info = w.get_megatron_rank_info()
        expected = data.batch["x"][:3] if info.dp_rank == 0 else torch.cat([data.batch["x"][3:], data.batch["x"][:1]])
        assert torch.equal(w.seen[0], expected), info


def test_compute_lists_by_dp_rank_and_collects_in_dp_order():
    wg = _group(tp=2, dp=2, pp=1)
    out = wg.scale([1, 2])
    assert out == [(10, 0, 0, 0), (20, 1, 0, 0)]
    with pytest.raises(ValueError, match=r"MEGATRON_COMPUTE needs every argument as a list of 2 values; argument 0 is a int"):
        wg.scale(3)


def test_pp_as_dp_proto_splits_over_pipeline_and_data_ranks_and_restores_order():
    wg = _group(tp=2, dp=2, pp=2)
    data = _rows(8)  # 4 chunks (pp x dp) of 2 rows
    out = wg.generate(data)
    assert torch.equal(out.batch["x"], data.batch["x"])
    assert out.batch["tp"].tolist() == [0] * 8
    # item (dp * pp_size + pp): dp0pp0, dp0pp1, dp1pp0, dp1pp1
    assert out.batch["dp"].tolist() == [0, 0, 0, 0, 1, 1, 1, 1]
    assert out.batch["pp"].tolist() == [0, 0, 1, 1, 0, 0, 1, 1]
    for w in wg._workers:  # the tp ranks of one (dp, pp) got the same 2 rows
        info = w.get_megatron_rank_info()
        start = 2 * (info.dp_rank * 2 + info.pp_rank)
        assert torch.equal(w.seen[0], data.batch["x"][start:start + 2])


def test_pp_only_collects_one_output_per_stage():
    wg = _group(tp=2, dp=2, pp=2)
    assert wg.stage() == [(0, 0, 0), (1, 0, 0)]


def test_megatron_modes_need_registered_megatron_workers():
    wg = InProcessGroup(MegaWorker, 2)  # init_model not called: nothing registered
    with pytest.raises(ValueError, match=r"worker ranks \[0, 1\] have not called _register_megatron_rank_info"):
        wg.compute(_rows(2))

    class Plain(Worker):
        @register(dispatch_mode=Dispatch.MEGATRON_COMPUTE_PROTO)
        def compute(self, data):
            return data

    with pytest.raises(TypeError, match="subclass verl.single_controller.base.megatron.MegatronWorker; Plain does not"):
        InProcessGroup(Plain, 2).compute(_rows(2))


def test_layout_errors_are_caught():
    wg = InProcessGroup(MegaWorker, 2)
    for w in wg._workers:  # both claim tp rank 0 of a tp=2 layout
        w._register_megatron_rank_info(DistRankInfo(0, 0, 0, 0), DistGlobalInfo(2, 1, 1, 1))
    with pytest.raises(ValueError, match="two workers registered the same Megatron"):
        wg.compute(_rows(2))
    w = MegaWorker()
    with pytest.raises(ValueError, match="tp_rank=2 is outside tp_size=2"):
        w._register_megatron_rank_info(DistRankInfo(2, 0, 0, 0), DistGlobalInfo(2, 1, 1, 1))
