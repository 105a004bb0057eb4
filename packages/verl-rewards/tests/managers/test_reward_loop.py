"""The reward loop (core's `RewardLoop`) against the one-pass managers: the same batch scored sample by
sample on a thread pool, in chunks as a chunked generation hands them over, gives exactly the one-pass
reward tensor, extra columns and metrics (rule, DAPO overlong, errors counted as zero, and the sandboxed
code scorer), and the hand-derived scores."""

import numpy as np
import pytest
import torch
from verl import DataProto
from verl.rewards.managers import DAPORewardManager, NaiveRewardManager, PrimeRewardManager
from verl.rewards.managers.loader import load_reward_manager
from verl.trainer.ppo.reward_loop import RewardLoop, chunk_bounds

from .test_managers import (
    _HACK,
    _HONEST,
    _WRONG,
    CharTokenizer,
    _arith_batch,
    _code_and_math_batch,
    _dapo_like,
    make_batch,
)


@pytest.fixture
def tokenizer():
    return CharTokenizer()


def _with_uids(data: DataProto) -> DataProto:
    data.non_tensor_batch["uid"] = np.array([f"u{i}" for i in range(len(data))], dtype=object)
    return data


def scored_by_loop(manager, data: DataProto, chunks: int, num_workers: int = 3) -> dict:
    """Hand ``data`` to a reward loop in ``chunks`` chunks (one row per group), as the trainer's chunked
    generation does, and collect the assembled result."""
    loop = RewardLoop(manager, num_workers)
    try:
        loop.start()
        for k, (start, end) in enumerate(chunk_bounds(len(data), 1, chunks)):
            loop.record("gen_end", k)
            loop.submit(data.slice(start, end), k)
        return loop.result(data)
    finally:
        loop.close()


def assert_same(loop_out: dict, one_pass: dict) -> None:
    assert torch.equal(loop_out["reward_tensor"], one_pass["reward_tensor"])
    assert loop_out["reward_extra_info"] == one_pass["reward_extra_info"]
    assert loop_out["reward_metrics"] == one_pass["reward_metrics"]


@pytest.mark.parametrize("chunks", [1, 2, 3])
def test_rule_scores_match_one_pass_and_hand_values(tokenizer, chunks):
    mgr = NaiveRewardManager(tokenizer, 0)
    data = _with_uids(_arith_batch())
    out = scored_by_loop(mgr, data, chunks)
    assert_same(out, mgr(data, return_dict=True))
    # "2" (1 token) right, "Answer: 23" (10 tokens) right, "17" wrong
    assert out["reward_tensor"][0, 0] == 1.0 and out["reward_tensor"][1, 9] == 1.0
    assert out["reward_tensor"].sum().item() == 2.0
    assert out["reward_extra_info"]["verdict"] == ["passed", "passed", "wrong_answer"]


def test_dapo_overlong_and_extra_columns_match_one_pass(tokenizer):
    data = _with_uids(make_batch(["q"] * 4, ["Answer: 1", "Answer: 2", "Ans", "Answer:1"], ["math_dapo"] * 4,
                                 ["1"] * 4, max_resp=10))  # fmt: skip
    mgr = DAPORewardManager(tokenizer, 0, compute_score=_dapo_like, max_resp_len=10,
                            overlong_buffer={"enable": True, "len": 4, "penalty_factor": 1.0, "log": True})  # fmt: skip
    out = scored_by_loop(mgr, data, chunks=2)
    assert_same(out, mgr(data, return_dict=True))
    assert out["reward_extra_info"]["overlong_reward"] == pytest.approx([-0.75, -0.75, 0.0, -0.5])


def test_columns_missing_in_some_rows_and_error_counts_match_one_pass(tokenizer):
    def scorer(data_source, solution_str, ground_truth, extra_info=None):
        if solution_str == "17":
            raise ZeroDivisionError("boom")
        if solution_str == "2":
            return {"score": 1.0, "only_here": 7}
        return 0.5

    mgr = NaiveRewardManager(tokenizer, 0, compute_score=scorer, count_errors_as_zero=True)
    data = _with_uids(_arith_batch())
    out = scored_by_loop(mgr, data, chunks=3)
    assert_same(out, mgr(data, return_dict=True))
    assert out["reward_metrics"] == {"reward/score_errors": 1.0}
    assert out["reward_extra_info"] == {"score": [1.0, 0.5, 0.0], "only_here": [7, None, None]}


def test_a_failing_scorer_is_raised_from_result_naming_its_batch_row(tokenizer):
    def scorer(data_source, solution_str, ground_truth, extra_info=None):
        if solution_str == "17":
            raise ZeroDivisionError("boom")
        return 1.0

    # row 2 of the batch, scored alone in the second chunk: named as in one pass
    with pytest.raises(RuntimeError, match=r"row 2 \(data_source='arithmetic'\): ZeroDivisionError: boom"):
        scored_by_loop(NaiveRewardManager(tokenizer, 0, compute_score=scorer), _with_uids(_arith_batch()), 2)


def test_sandboxed_code_scores_match_one_pass(tokenizer):
    """The local sandbox runs each program in a subprocess; scored from 4 threads at once, in 3 chunks."""
    mgr = load_reward_manager({"sandbox": {"name": "local", "timeout": 5}}, tokenizer, 0)
    data = _with_uids(_code_and_math_batch([_HONEST, _WRONG, _HACK, _HONEST]))
    out = scored_by_loop(mgr, data, chunks=3, num_workers=4)
    assert_same(out, mgr(data, return_dict=True))
    assert out["reward_extra_info"]["verdict"] == ["passed", "wrong_answer", "hack", "passed", "passed", "format"]
    assert out["reward_tensor"].sum(-1).tolist() == [1.0, 0.0, 0.0, 1.0, 1.0, 0.0]


def test_prime_manager_scores_match_one_pass(tokenizer):
    mgr = PrimeRewardManager(tokenizer, 0, num_processes=2, timeout=30)
    try:
        data = _with_uids(_arith_batch())
        assert_same(scored_by_loop(mgr, data, chunks=2), mgr(data, return_dict=True))
    finally:
        mgr.close()


def test_rows_reordered_or_dropped_after_generation_are_refused(tokenizer):
    mgr = NaiveRewardManager(tokenizer, 0)
    data = _with_uids(_arith_batch())
    loop = RewardLoop(mgr, 2)
    loop.start()
    loop.submit(data, 0)
    with pytest.raises(ValueError, match="must not reorder rows"):
        loop.result(data.select_idxs([2, 1, 0]))
    loop.start()
    loop.submit(data, 0)
    with pytest.raises(ValueError, match="3 samples were scored during generation but the reward stage got 2 rows"):
        loop.result(data.slice(0, 2))
    loop.close()
