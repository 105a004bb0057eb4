import sys
import textwrap

import cloudpickle
import numpy as np
import pytest
import torch
from verl import DataProto
from verl.registries import REWARD_MANAGERS
from verl.rewards.managers import (
    BatchRewardManager,
    DAPORewardManager,
    NaiveRewardManager,
    PrimeRewardManager,
)
from verl.rewards.managers.loader import load_reward_manager

PAD = 0


class CharTokenizer:
    """id = ord(char); 0 is padding. Enough to check decoding and token placement exactly."""

    pad_token_id = PAD

    def decode(self, ids, skip_special_tokens=True):
        return "".join(chr(int(i)) for i in ids if not (skip_special_tokens and int(i) == PAD))

    def batch_decode(self, sequences, skip_special_tokens=True):  # as HF tokenizers have it
        return [self.decode(ids, skip_special_tokens) for ids in sequences]


def _encode(text):
    return [ord(c) for c in text]


def make_batch(prompts, responses, data_sources, ground_truths, extra_infos=None, max_resp=None):
    """A DataProto as the rollout leaves it: left-padded prompts, right-padded responses."""
    n = len(prompts)
    p = max(len(x) for x in prompts)
    r = max_resp or max(len(x) for x in responses)
    prompt_ids = torch.zeros(n, p, dtype=torch.long)
    resp_ids = torch.zeros(n, r, dtype=torch.long)
    attn = torch.zeros(n, p + r, dtype=torch.long)
    for i, (pt, rt) in enumerate(zip(prompts, responses)):
        pe, re_ = _encode(pt), _encode(rt)
        prompt_ids[i, p - len(pe) :] = torch.tensor(pe)
        attn[i, p - len(pe) : p] = 1
        if re_:
            resp_ids[i, : len(re_)] = torch.tensor(re_)
            attn[i, p : p + len(re_)] = 1
    return DataProto.from_dict(
        tensors={
            "prompts": prompt_ids,
            "responses": resp_ids,
            "input_ids": torch.cat([prompt_ids, resp_ids], dim=1),
            "attention_mask": attn,
            "response_mask": attn[:, p:].clone(),
        },
        non_tensors={
            "data_source": np.array(data_sources, dtype=object),
            "reward_model": np.array([{"ground_truth": g} for g in ground_truths], dtype=object),
            "extra_info": np.array(extra_infos or [{} for _ in range(n)], dtype=object),
        },
    )


@pytest.fixture
def tokenizer():
    return CharTokenizer()


def _arith_batch():
    return make_batch(
        prompts=["1+1=", "20+3=", "9+9="],
        responses=["2", "Answer: 23", "17"],
        data_sources=["arithmetic"] * 3,
        ground_truths=["2", "23", "18"],
        max_resp=12,
    )


def test_registry_holds_the_four_managers():
    assert REWARD_MANAGERS.get("naive") is NaiveRewardManager
    assert REWARD_MANAGERS.get("batch") is BatchRewardManager
    assert REWARD_MANAGERS.get("dapo") is DAPORewardManager
    assert REWARD_MANAGERS.get("prime") is PrimeRewardManager


def test_naive_places_each_score_on_the_last_valid_token(tokenizer, capsys):
    data = _arith_batch()
    out = NaiveRewardManager(tokenizer, num_examine=1)(data, return_dict=True)
    want = torch.zeros(3, 12)
    want[0, 0] = 1.0  # "2": length 1
    want[1, 9] = 1.0  # "Answer: 23": length 10
    # row 2 is wrong: all zeros
    torch.testing.assert_close(out["reward_tensor"], want)
    assert out["reward_extra_info"] == {
        "score": [1.0, 1.0, 0.0],
        "verdict": ["passed", "passed", "wrong_answer"],
    }
    printed = capsys.readouterr().out
    assert printed.count("[prompt]") == 1 and "[prompt] 1+1=" in printed and "[response] 2" in printed


def test_plain_call_returns_the_tensor(tokenizer):
    t = NaiveRewardManager(tokenizer, 0)(_arith_batch())
    assert t.shape == (3, 12) and t.sum().item() == 2.0


def test_extra_info_from_dict_scorers(tokenizer):
    def scorer(data_source, solution_str, ground_truth, extra_info=None):
        return {"score": float(len(solution_str)), "echo": extra_info["tag"], "gt": ground_truth}

    data = make_batch(
        ["a", "b"], ["xyz", "q"], ["s", "s"], ["g1", "g2"], extra_infos=[{"tag": "t0"}, {"tag": "t1"}]
    )
    out = NaiveRewardManager(tokenizer, 0, compute_score=scorer)(data, return_dict=True)
    assert out["reward_extra_info"] == {"score": [3.0, 1.0], "echo": ["t0", "t1"], "gt": ["g1", "g2"]}
    assert out["reward_tensor"][0, 2] == 3.0 and out["reward_tensor"][1, 0] == 1.0


def test_scorer_error_names_row_and_source(tokenizer):
    def scorer(data_source, solution_str, ground_truth, extra_info=None):
        if solution_str == "17":
            raise ZeroDivisionError("boom")
        return 1.0

    with pytest.raises(RuntimeError, match=r"row 2 \(data_source='arithmetic'\): ZeroDivisionError: boom"):
        NaiveRewardManager(tokenizer, 0, compute_score=scorer)(_arith_batch())
    out = NaiveRewardManager(tokenizer, 0, compute_score=scorer, count_errors_as_zero=True)(
        _arith_batch(), return_dict=True
    )
    assert out["reward_metrics"] == {"reward/score_errors": 1.0}
    assert out["reward_tensor"].sum().item() == 2.0


def test_unknown_data_source_row_is_an_error(tokenizer):
    data = make_batch(["p"], ["r"], ["nope/source"], ["g"])
    with pytest.raises(RuntimeError, match=r"row 0 \(data_source='nope/source'\).*known: "):
        NaiveRewardManager(tokenizer, 0)(data)


def test_unknown_manager_option_is_named(tokenizer):
    with pytest.raises(TypeError, match=r"unknown options \['max_resp_len'\]"):
        NaiveRewardManager(tokenizer, 0, max_resp_len=5)


def _dapo_like(data_source, solution_str, ground_truth, extra_info=None):
    # DAPO's result shape without math-verify (keeps this test free of the helper process).
    acc = solution_str.replace(" ", "").endswith(f"Answer:{ground_truth}")
    return {"score": 1.0 if acc else -1.0, "acc": acc, "pred": solution_str}


def test_dapo_overlong_penalty_matches_hand_values(tokenizer):
    # max_resp_len 10, buffer 4, factor 1: lengths <= 6 are free, each token beyond costs 1/4.
    responses = ["Answer: 1", "Answer: 2", "Ans", "Answer:1"]
    lengths = [9, 9, 3, 8]
    data = make_batch(["q"] * 4, responses, ["math_dapo"] * 4, ["1", "1", "1", "1"], max_resp=10)
    mgr = DAPORewardManager(
        tokenizer,
        0,
        compute_score=_dapo_like,
        max_resp_len=10,
        overlong_buffer={"enable": True, "len": 4, "penalty_factor": 1.0, "log": True},
    )
    out = mgr(data, return_dict=True)
    base_scores = [1.0, -1.0, -1.0, 1.0]
    penalties = [-(9 - 6) / 4, -(9 - 6) / 4, 0.0, -(8 - 6) / 4]
    assert out["reward_extra_info"]["overlong_reward"] == pytest.approx(penalties)
    assert out["reward_extra_info"]["overlong"] == [True, True, False, True]
    assert out["reward_extra_info"]["acc"] == [True, False, False, True]
    for i, (length, b, p) in enumerate(zip(lengths, base_scores, penalties)):
        assert out["reward_tensor"][i, length - 1].item() == pytest.approx(b + p)
        assert out["reward_tensor"][i].abs().sum().item() == pytest.approx(abs(b + p))


def test_dapo_penalty_factor_and_validation(tokenizer):
    mgr = DAPORewardManager(
        tokenizer, 0, max_resp_len=100, overlong_buffer_cfg={"enable": True, "len": 20, "penalty_factor": 0.5}
    )
    assert mgr.overlong_penalty(80) == 0.0
    assert mgr.overlong_penalty(90) == pytest.approx(-0.25)
    assert mgr.overlong_penalty(100) == pytest.approx(-0.5)
    with pytest.raises(ValueError, match="needs max_resp_len"):
        DAPORewardManager(tokenizer, 0, overlong_buffer={"enable": True, "len": 4})


def test_batch_manager_user_function_gets_lists(tokenizer):
    seen = {}

    def batched(data_sources, solution_strs, ground_truths, extra_infos):
        seen.update(ds=data_sources, sol=solution_strs)
        return [{"score": float(s.endswith(g)), "n": len(s)} for s, g in zip(solution_strs, ground_truths)]

    out = BatchRewardManager(tokenizer, 0, compute_score=batched)(_arith_batch(), return_dict=True)
    assert seen == {"ds": ["arithmetic"] * 3, "sol": ["2", "Answer: 23", "17"]}
    assert out["reward_extra_info"] == {"score": [1.0, 1.0, 0.0], "n": [1, 10, 2]}


def test_batch_manager_default_scorer(tokenizer):
    t = BatchRewardManager(tokenizer, 0)(_arith_batch())
    assert t[0, 0] == 1.0 and t[1, 9] == 1.0 and t.sum() == 2.0


def _slow_on_17(data_source, solution_str, ground_truth, extra_info=None):
    if solution_str == "17":
        while True:
            pass
    return 1.0 if solution_str.strip().endswith(str(ground_truth)) else 0.0


def test_prime_times_out_one_row_and_scores_the_rest(tokenizer):
    # Test modules are not importable by name in the workers: ship the scorer by value.
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    mgr = PrimeRewardManager(tokenizer, 0, compute_score=_slow_on_17, num_processes=2, timeout=3)
    try:
        out = mgr(_arith_batch(), return_dict=True)
    finally:
        mgr.close()
    assert out["reward_metrics"]["reward/score_timeouts"] == 1.0
    assert out["reward_extra_info"]["score"] == [1.0, 1.0, 0.0]


def test_load_reward_manager_from_config(tokenizer, tmp_path):
    from omegaconf import OmegaConf

    f = tmp_path / "rw.py"
    f.write_text(
        textwrap.dedent("""
        def my_score(data_source, solution_str, ground_truth, extra_info=None, scale=1.0):
            return scale * float(solution_str == ground_truth)
    """)
    )
    cfg = OmegaConf.create(
        {
            "reward_manager": "dapo",
            "overlong_buffer": {"enable": True, "len": 4, "penalty_factor": 1.0},
            "custom_reward_function": {"path": str(f), "name": "my_score", "reward_kwargs": {"scale": 3.0}},
        }
    )
    mgr = load_reward_manager(cfg, tokenizer, num_examine=0, max_resp_len=12)
    assert isinstance(mgr, DAPORewardManager) and mgr.max_resp_len == 12 and mgr.overlong_len == 4
    out = mgr(_arith_batch(), return_dict=True)
    # row 1 "Answer: 23" is 10 tokens: 2 past the free 8, penalty -2/4 on top of score 0
    assert out["reward_extra_info"]["score"] == [3.0, 0.0, 0.0]
    assert out["reward_extra_info"]["overlong_reward"] == [0.0, -0.5, 0.0]
    with pytest.raises(KeyError, match="unknown reward manager 'naïve'"):
        load_reward_manager({"reward_manager": "naïve"}, tokenizer, 0)
    with pytest.raises(ValueError, match="needs reward.reward_manager=dapo"):
        load_reward_manager({"overlong_buffer": {"enable": True, "len": 2}}, tokenizer, 0)
    with pytest.raises(TypeError, match="expects the reward config section .*got list"):
        load_reward_manager([], tokenizer, 0)
    # the wrapper feeds core's loader: reward_fn_key argument > section key > data_source
    assert load_reward_manager({"reward_fn_key": "src"}, tokenizer, 0).reward_fn_key == "src"
    assert load_reward_manager({"reward_fn_key": "src"}, tokenizer, 0, reward_fn_key="k").reward_fn_key == "k"
    # the budget reaches dapo only with overlong shaping; naive never gets it
    assert isinstance(load_reward_manager({}, tokenizer, 0, max_resp_len=12), NaiveRewardManager)
    # verl.rewards registers the judge hook with core's loader (no request is made while building)
    from verl.rewards import load_reward_manager as public_loader
    from verl.rewards.models.judge import RuleAndJudgeScorer

    judge = {"enable": True, "backend": "openai", "url": "http://127.0.0.1:9/v1", "model": "m"}
    mgr = public_loader({"reward_kwargs": {"judge": judge}}, tokenizer, 0)
    assert public_loader is load_reward_manager and isinstance(mgr.compute_score, RuleAndJudgeScorer)


def test_load_reward_manager_with_the_core_config_schema(tokenizer):
    config_loader = pytest.importorskip("verl.trainer.config.loader")
    cfg = config_loader.load_config(["reward.reward_manager=batch", "+reward.reward_kwargs.max_workers=2"])
    mgr = load_reward_manager(
        cfg.reward, tokenizer, cfg.reward.num_examine, reward_fn_key=cfg.data.reward_fn_key
    )
    assert isinstance(mgr, BatchRewardManager) and mgr.max_workers == 2
    assert mgr.score_kwargs["sandbox"] == "local"
    assert mgr(_arith_batch()).sum().item() == 2.0


def test_load_reward_manager_passes_sandbox_to_code_rows(tokenizer):
    data = make_batch(
        ["write add"],
        ["```python\na, b = map(int, input().split())\nprint(a + b)\n```"],
        ["apps"],
        ['{"inputs": ["2 3"], "outputs": ["5"]}'],
    )
    mgr = load_reward_manager({"sandbox": {"name": "local", "timeout": 5}}, tokenizer, 0)
    assert mgr.score_kwargs == {"sandbox": "local", "sandbox_options": {"timeout": 5}}
    out = mgr(data, return_dict=True)
    assert out["reward_extra_info"]["pass_rate"] == [1.0] and out["reward_extra_info"]["failure"] == ["none"]


# -- verdicts: why each sample got its score, as step metrics ------------------------------------
_ADD_TEST = {"test": "def check(candidate):\n    assert candidate(2, 3) == 5\n", "entry_point": "add",
             "prompt": "def add(a, b):\n    pass\n"}  # fmt: skip
_HONEST = "```python\ndef add(a, b):\n    return a + b\n```"
_WRONG = "```python\ndef add(a, b):\n    return a - b\n```"
_HACK = "```python\nclass A:\n    def __eq__(self, o): return True\ndef add(a, b):\n    return A()\n```"


def _code_and_math_batch(codes):
    n = len(codes)
    return make_batch(
        prompts=["write add"] * n + ["1+1=", "2+2="],
        responses=codes + ["2", "Answer:"],
        data_sources=["humaneval"] * n + ["arithmetic"] * 2,
        ground_truths=[_ADD_TEST] * n + ["2", "4"],
    )


def test_verdicts_become_per_sample_fields_and_step_metrics_through_the_trainer(tokenizer, tmp_path):
    """A manager's verdict column -> the trainer's reward stage (its metrics and non-tensor columns) ->
    the tracker: each verdict's share per step in metrics.jsonl and in the plot's history, so a rising
    share of refused hacks is visible."""
    import json
    from types import SimpleNamespace

    from verl.trainer.ppo.ray_trainer import RayPPOTrainer
    from verl.utils.tracking import Tracking

    manager = NaiveRewardManager(tokenizer, num_examine=0)
    tracker = Tracking("verdicts", "t", default_backend=["jsonl"], output_dir=str(tmp_path))
    steps = [[_HONEST, _WRONG, _WRONG], [_HONEST, _WRONG, _HACK], [_HONEST, _HACK, _HACK]]
    for step, codes in enumerate(steps, start=1):
        metrics: dict = {}
        batch = RayPPOTrainer.rule_reward(
            SimpleNamespace(reward_fn=manager, reward_loop=None), _code_and_math_batch(codes), metrics
        )
        if step == 2:  # per sample: honest passes, wrong, refused hack; the math rows: right, no answer
            assert list(batch.non_tensor_batch["verdict"]) == [
                "passed",
                "wrong_answer",
                "hack",
                "passed",
                "format",
            ]
            assert batch.batch["token_level_scores"].sum(-1).tolist() == [1.0, 0.0, 0.0, 1.0, 0.0]
        metrics["critic/score/mean"] = batch.batch["token_level_scores"].sum(-1).mean().item()
        tracker.log(metrics, step=step)
    tracker.finish()
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    # 5 samples per step: the honest solution and the right math answer pass, the empty answer is a format failure
    assert [r["reward/verdict/hack"] for r in rows] == [0.0, 0.2, 0.4]
    assert [r["reward/verdict/wrong_answer"] for r in rows] == [0.4, 0.2, 0.0]
    assert all(r["reward/verdict/passed"] == 0.4 and r["reward/verdict/format"] == 0.2 for r in rows)
    assert all(r["reward/verdict/timeout"] == 0.0 and r["reward/verdict/sandbox_error"] == 0.0 for r in rows)
    assert tracker.share_history["reward/verdict/hack"] == [(1, 0.0), (2, 0.2), (3, 0.4)]
    assert (tmp_path / "reward_curve.png").stat().st_size > 0


def test_verdict_metrics_refuse_unknown_kinds_and_skip_rows_without_one():
    from verl.rewards.scoring.verdicts import VERDICTS, verdict_metrics

    shares = verdict_metrics(["passed", None, "timeout", "timeout"])
    assert shares == {
        f"reward/verdict/{v}": {"passed": 1 / 3, "timeout": 2 / 3}.get(v, 0.0) for v in VERDICTS
    }
    assert verdict_metrics([None, None]) == {}
    with pytest.raises(ValueError, match=r"unknown verdict\(s\) \['cheated'\]; known: \['passed'"):
        verdict_metrics(["cheated"])
