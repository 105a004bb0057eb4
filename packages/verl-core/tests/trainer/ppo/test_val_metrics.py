"""Validation metrics (mean@N, std@N, bootstrap best@k / worst@k / maj@k) against hand-derived values,
exact expectations and a plain per-resample loop with the same seed."""

import math

import numpy as np
import pytest
from verl.trainer.ppo.metric_utils import (
    bootstrap_metric,
    calc_maj_val,
    process_validation_metrics,
    val_metrics_dict,
)


def loop_bootstrap(values, k, reduce, seed=42, n_bootstrap=1000):
    """Independent of the code under test: upstream's documented draw (seed, then choice(N, (B, k))),
    one resample at a time in plain Python."""
    rs = np.random.RandomState(seed)
    idx = rs.choice(len(values), size=(n_bootstrap, k), replace=True)
    stats = [reduce([values[i] for i in row]) for row in idx]
    mean = sum(stats) / len(stats)
    return mean, math.sqrt(sum((s - mean) ** 2 for s in stats) / len(stats))


def first_majority(pairs):
    """The value of the first pair whose pred is the most common (ties: the pred seen first)."""
    counts = {}
    for pred, _ in pairs:
        counts[pred] = counts.get(pred, 0) + 1
    best = max(counts.values())
    winner = next(p for p, _ in pairs if counts[p] == best)
    return next(v for p, v in pairs if p == winner)


def expected_best(values, k):
    """Exact E[max of k draws with replacement]: sum over distinct v of v * (F(v)^k - F(v^-)^k)."""
    n = len(values)
    return sum(v * ((sum(x <= v for x in values) / n) ** k - (sum(x < v for x in values) / n) ** k)
               for v in set(values))


def test_one_prompt_by_hand_and_against_the_loop():
    acc = [1.0, 0.0, 0.0, 1.0, 0.0]
    out = process_validation_metrics(["s"] * 5, ["u"] * 5, {"acc": acc})
    m = out["s"]["acc"]
    # N = 5: subset sizes 2, 4 and 5; no pred -> no maj
    assert set(m) == {"mean@5", "std@5"} | {f"{w}@{k}/{s}" for w in ("best", "worst") for k in (2, 4, 5)
                                             for s in ("mean", "std")}
    assert m["mean@5"] == pytest.approx(0.4)
    assert m["std@5"] == pytest.approx(math.sqrt(0.24))  # population std of a 0/1 variable with p = .4
    for k in (2, 4, 5):
        assert (m[f"best@{k}/mean"], m[f"best@{k}/std"]) == pytest.approx(loop_bootstrap(acc, k, max), abs=1e-12)
        assert (m[f"worst@{k}/mean"], m[f"worst@{k}/std"]) == pytest.approx(loop_bootstrap(acc, k, min), abs=1e-12)
        # pass@k with replacement is 1 - 0.6^k; 1000 resamples are within 4 standard errors of it
        p = 1 - 0.6**k
        assert m[f"best@{k}/mean"] == pytest.approx(p, abs=4 * math.sqrt(p * (1 - p) / 1000))
        assert m[f"best@{k}/mean"] == pytest.approx(expected_best(acc, k), abs=4 * math.sqrt(p * (1 - p) / 1000))
        q = 0.4**k  # worst@k = 1 only when every draw is 1
        assert m[f"worst@{k}/mean"] == pytest.approx(q, abs=4 * math.sqrt(q * (1 - q) / 1000) + 1e-9)


def test_majority_vote_by_hand_expectation_and_loop():
    # answers x, y, x with values 1, 0, 1 (x is right)
    vals, preds = [1.0, 0.0, 1.0], ["x", "y", "x"]
    m = process_validation_metrics(["s"] * 3, ["u"] * 3, {"acc": vals, "pred": preds})["s"]["acc"]
    # k=2: a tie goes to the answer drawn first, so P(x wins) = P(first draw is x) = 2/3
    # k=3: x wins with at least 2 of 3 draws: (2/3)^3 + 3 (2/3)^2 (1/3) = 20/27
    for k, p in ((2, 2 / 3), (3, 20 / 27)):
        assert m[f"maj@{k}/mean"] == pytest.approx(p, abs=4 * math.sqrt(p * (1 - p) / 1000))
        pairs = list(zip(preds, vals))
        want = loop_bootstrap(pairs, k, first_majority)
        assert (m[f"maj@{k}/mean"], m[f"maj@{k}/std"]) == pytest.approx(want, abs=1e-12)
    assert calc_maj_val([{"pred": "A", "val": 0.9}, {"pred": "B", "val": 0.8}, {"pred": "A", "val": 0.7}],
                        vote_key="pred", val_key="val") == 0.9
    assert calc_maj_val([{"p": "B", "v": 2}, {"p": "A", "v": 1}], vote_key="p", val_key="v") == 2  # tie: first


def test_vectorised_majority_equals_calc_maj_val_with_many_answers_and_ties():
    rng = np.random.RandomState(3)
    vals = rng.rand(12).round(2).tolist()
    preds = rng.choice(["a", "b", "c", "d", "e"], size=12).tolist()
    m = process_validation_metrics(["s"] * 12, ["u"] * 12, {"score": vals, "pred": preds}, seed=11)["s"]["score"]
    data = [{"pred": p, "val": v} for p, v in zip(preds, vals)]
    for k in (2, 4, 8, 12):
        [(mean, std)] = bootstrap_metric(data, k, [lambda s: calc_maj_val(s, "pred", "val")], seed=11)
        assert (m[f"maj@{k}/mean"], m[f"maj@{k}/std"]) == pytest.approx((mean, std), abs=1e-12)
        [(bmean, _), (wmean, _)] = bootstrap_metric(vals, k, [np.max, np.min], seed=11)
        assert (m[f"best@{k}/mean"], m[f"worst@{k}/mean"]) == pytest.approx((bmean, wmean), abs=1e-12)


def test_grouping_averaging_and_which_variables_get_metrics():
    sources = ["a", "a", "a", "a", "b", "b", "a"]
    uids = ["p", "p", "q", "q", "r", "r", "z"]
    infos = {
        "reward": [1.0, 0.0, 1.0, 1.0, 0.5, None, 3.0],  # None: skipped
        "pred": ["x", None, "y", "y", "1", "2", "w"],  # one pred missing in p -> no maj for p
        "note": ["s"] * 7,  # strings get no metrics
    }
    out = process_validation_metrics(sources, uids, infos)
    assert set(out) == {"a", "b"} and set(out["a"]) == {"reward"} and set(out["b"]) == {"reward"}
    a = out["a"]["reward"]
    # p and q have 2 responses, z has 1: mean@2 averages p (.5) and q (1); mean@1 is z's alone
    assert a["mean@2"] == pytest.approx(0.75) and a["mean@1"] == pytest.approx(3.0)
    assert a["std@2"] == pytest.approx((0.5 + 0.0) / 2)
    assert a["maj@2/mean"] == pytest.approx(1.0)  # only q has maj (both y, value 1)
    b = out["b"]["reward"]
    # r has one reward left after dropping None, but 2 preds: no maj; one response: only mean@1
    assert b == {"mean@1": 0.5}


def test_expected_acc_counts_fill_missing_sessions_with_zero():
    out = process_validation_metrics(
        ["s", "s", "t"], ["u", "u", "v"], {"acc": [1.0, 1.0, None], "reward": [1.0, 1.0, 0.5]},
        expected_acc_counts={("s", "u"): 4, ("t", "v"): 3},
    )
    assert out["s"]["acc"]["mean@4"] == pytest.approx(0.5)  # [1, 1, 0, 0]
    assert out["s"]["acc_success_only"]["mean@2"] == pytest.approx(1.0)
    assert "acc" not in out["t"] and "acc_success_only" not in out["t"]  # t reports no acc


def test_flat_names_core_and_aux_and_num_turns():
    acc = [1.0, 0.0, 1.0, 1.0]
    flat = val_metrics_dict(["d"] * 4, ["u"] * 4, {"reward": [2.0, 0.0, 2.0, 2.0], "acc": acc, "pred": list("abaa")},
                            sample_turns=[1, 3, 2, 2])
    core = sorted(k for k in flat if k.startswith("val-core/"))
    # acc is the core variable when present; at the largest N only, and only mean / best / maj (with std)
    assert core == [f"val-core/d/acc/{m}" for m in ("best@4/mean", "best@4/std", "maj@4/mean", "maj@4/std", "mean@4")]
    assert flat["val-core/d/acc/mean@4"] == pytest.approx(0.75)
    for key in ("val-aux/d/acc/std@4", "val-aux/d/acc/best@2/mean", "val-aux/d/acc/maj@2/std",
                "val-aux/d/acc/worst@4/mean", "val-aux/d/reward/mean@4", "val-aux/d/reward/maj@4/mean"):
        assert key in flat, key
    assert flat["val-aux/d/reward/mean@4"] == pytest.approx(1.5)
    assert (flat["val-aux/num_turns/min"], flat["val-aux/num_turns/max"], flat["val-aux/num_turns/mean"]) == (1, 3, 2)
    no_acc = val_metrics_dict(["d"] * 2, ["u"] * 2, {"reward": [1.0, 0.0]})
    assert "val-core/d/reward/mean@2" in no_acc and "val-aux/d/reward/std@2" in no_acc


def test_seeded_and_leaves_the_global_rng_alone():
    vals = [0.1, 0.9, 0.4, 0.7, 0.2, 0.3]
    a = process_validation_metrics(["s"] * 6, ["u"] * 6, {"r": vals}, seed=1)
    np.random.seed(5)
    before = np.random.rand()
    np.random.seed(5)
    b = process_validation_metrics(["s"] * 6, ["u"] * 6, {"r": vals}, seed=1)
    assert np.random.rand() == before
    assert a == b
    c = process_validation_metrics(["s"] * 6, ["u"] * 6, {"r": vals}, seed=2)
    assert c["s"]["r"]["best@2/mean"] != a["s"]["r"]["best@2/mean"]


def test_misaligned_inputs_are_refused():
    with pytest.raises(ValueError, match="2 data_sources but 1 sample_uids"):
        process_validation_metrics(["s", "s"], ["u"], {"r": [1, 2]})
    with pytest.raises(ValueError, match=r"infos_dict\['r'\] has 1 values for 2 samples"):
        process_validation_metrics(["s", "s"], ["u", "u"], {"r": [1]})


def test_validation_infos_stay_aligned_when_a_batch_lacks_a_key():
    from collections import defaultdict

    from verl.trainer.ppo.validation import _extend_infos

    infos = defaultdict(list)
    _extend_infos(infos, 0, {"reward": [1.0, 0.0], "acc": [1.0, 0.0]}, 2)
    _extend_infos(infos, 2, {"reward": [1.0], "pred": ["x"]}, 1)
    assert dict(infos) == {"reward": [1.0, 0.0, 1.0], "acc": [1.0, 0.0, None], "pred": [None, None, "x"]}
    out = process_validation_metrics(["s"] * 3, ["u"] * 3, infos)["s"]
    assert out["acc"]["mean@2"] == pytest.approx(0.5) and out["reward"]["mean@3"] == pytest.approx(2 / 3)
