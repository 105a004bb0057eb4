"""MATH scorer on tricky cases (all checks go through the process-wide time-limited helper)."""

import pytest
from verl.rewards.scoring.math_equiv import compute_score, grade, last_boxed_only_string, remove_boxed
from verl.rewards.utils.time_limit import default_limiter

CASES = [
    # equivalent forms: 1
    (r"so $\boxed{\frac{1}{2}}$", "0.5", 1.0),
    (r"\boxed{0.5}", r"\frac12", 1.0),
    (r"\boxed{\dfrac{3}{4}}", r"\frac{3}{4}", 1.0),
    (r"\boxed{(x+1)^2}", "x^2+2x+1", 1.0),
    (r"\boxed{2\sqrt{2}}", r"\sqrt{8}", 1.0),
    (r"\boxed{[1, 3)}", "[1,3)", 1.0),
    (r"\boxed{\{2, 1\}}", r"\{1,2\}", 1.0),
    (r"first \boxed{3} then \boxed{4}", "4", 1.0),  # the last box counts
    (r"\boxed{\frac{\sqrt{3}}{2}}", r"\frac{\sqrt3}{2}", 1.0),
    (r"\boxed 5", "5", 1.0),
    (r"\boxed{10}", r"\boxed{10}", 1.0),  # ground truth given boxed
    # near misses: 0
    (r"\boxed{\frac{1}{3}}", "0.33", 0.0),
    (r"\boxed{(1,3)}", "[1,3)", 0.0),  # open vs half-open interval
    (r"\boxed{x^2+2x}", "x^2+2x+1", 0.0),
    (r"\boxed{-4}", "4", 0.0),
    # malformed output: 0
    ("the answer is 4", "4", 0.0),  # no box
    (r"\boxed{4", "4", 0.0),  # unbalanced
    (r"\boxed{}", "4", 0.0),
]


@pytest.mark.parametrize("response,gt,want", CASES)
def test_math_table(response, gt, want):
    assert compute_score(response, gt, timeout=60) == want


def test_boxed_extraction():
    assert last_boxed_only_string(r"a \boxed{\frac{1}{2}} b \fbox{3}") == r"\fbox{3}"
    assert remove_boxed(r"\boxed{\frac{1}{2}}") == r"\frac{1}{2}"
    assert last_boxed_only_string(r"\boxed{{a}") is None


def test_pathological_expression_is_cut_off_at_its_limit():
    # 9^(9^(9^9)) makes sympy multiply big integers in one C call that no signal can interrupt.
    limiter = default_limiter()
    restarts = limiter.restarts
    assert grade(r"\boxed{9^{9^{9^{9}}}}", "1", timeout=2) == {"score": 0.0, "verdict": "timeout"}
    assert limiter.restarts == restarts + 1  # it was the time limit that ended the check
