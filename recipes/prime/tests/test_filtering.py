"""The accuracy-band filter with oversampling, on hand-built groups."""

import numpy as np
import pytest
import torch
from verl_recipe_prime.filtering import accuracy_band_filter


def _groups(outcomes: dict[str, list[float]]):
    uids = np.array([u for u, labels in outcomes.items() for _ in labels], dtype=object)
    acc = torch.tensor([a for labels in outcomes.values() for a in labels])
    return uids, acc


# accuracies: a 1.0 (too easy), b 0.25, c 0.0 (too hard), d 0.5, e 0.75
OUTCOMES = {"a": [1, 1, 1, 1], "b": [1, 0, 0, 0], "c": [0, 0, 0, 0], "d": [1, 1, 0, 0], "e": [1, 1, 1, 0]}


def test_passing_groups_first_then_failing_ones_fill():
    uids, acc = _groups(OUTCOMES)
    band = dict(filter_accuracy=True, lower=0.2, upper=0.8)
    r = accuracy_band_filter(uids, acc, 3, **band)
    assert r.rows.tolist() == [4, 5, 6, 7, 12, 13, 14, 15, 16, 17, 18, 19]  # b, d, e
    assert (r.groups, r.passed, r.kept, r.kept_failing) == (5, 3, 3, 0)
    # one more group than pass: the first failing group in arrival order (a) fills the batch
    r4 = accuracy_band_filter(uids, acc, 4, **band)
    assert list(dict.fromkeys(uids[r4.rows])) == ["b", "d", "e", "a"] and r4.kept_failing == 1
    assert r4.metrics() == {
        "prime/groups": 5.0,
        "prime/passed_groups": 3.0,
        "prime/passed_group_ratio": 0.6,
        "prime/kept_failing_groups": 1.0,
    }


def test_band_bounds_are_inclusive_and_groups_need_not_be_contiguous():
    # 0.2 and 0.8 pass (upstream drops only acc < lower or acc > upper); rows of a group interleaved
    uids = np.array(["x", "y", "x", "y", "x", "y", "x", "y", "x", "y"], dtype=object)
    acc = torch.tensor([1, 1, 0, 1, 0, 1, 0, 1, 0, 0], dtype=torch.float32)  # x: 1/5 = 0.2, y: 4/5 = 0.8
    r = accuracy_band_filter(uids, acc, 2, filter_accuracy=True, lower=0.2, upper=0.8)
    assert r.passed == 2 and r.rows.tolist() == [0, 2, 4, 6, 8, 1, 3, 5, 7, 9]
    tight = accuracy_band_filter(uids, acc, 1, filter_accuracy=True, lower=0.25, upper=0.75)
    assert tight.passed == 0 and tight.rows.tolist() == [0, 2, 4, 6, 8]


def test_without_the_accuracy_filter_the_first_groups_are_kept():
    uids, acc = _groups(OUTCOMES)
    r = accuracy_band_filter(uids, acc, 2, filter_accuracy=False, lower=0.2, upper=0.8)
    assert list(dict.fromkeys(uids[r.rows])) == ["a", "b"] and r.passed == 5


def test_filter_truncate_drops_groups_that_hit_the_length_limit():
    uids, acc = _groups({"p": [1, 0], "q": [1, 0], "r": [0, 1]})
    lengths = torch.tensor([3, 7, 3, 6, 8, 2])  # max_response_length 8: a group fails at >= 8 - 1 = 7
    r = accuracy_band_filter(
        uids, acc, 2, filter_accuracy=True, lower=0.2, upper=0.8,
        response_lengths=lengths, filter_truncate=True, max_response_length=8,
    )  # fmt: skip
    assert list(dict.fromkeys(uids[r.rows])) == ["q", "p"] and (r.passed, r.kept_failing) == (1, 1)
    with pytest.raises(ValueError, match="filter_truncate needs response_lengths"):
        accuracy_band_filter(uids, acc, 2, filter_accuracy=False, lower=0, upper=1, filter_truncate=True)


def test_asking_for_more_groups_than_generated_is_an_error():
    uids, acc = _groups({"a": [1, 0]})
    with pytest.raises(ValueError, match="keep 2 groups but the batch has 1"):
        accuracy_band_filter(uids, acc, 2, filter_accuracy=True, lower=0.2, upper=0.8)
