"""The three ground-truth formats with passing, failing, crashing and timing-out programs."""

import json

import pytest
from verl.rewards.scoring.code import compute_score, extract_code, outputs_match, parse_ground_truth
from verl.rewards.scoring.verdicts import verdict_of

STDIO = {"inputs": ["1 2\n", "10 -3\n", "0 0\n"], "outputs": ["3\n", "7\n", "0\n"]}
ADD = "a, b = map(int, input().split())\nprint(a + b)\n"


def compute_score_kw(code, gt, **kw):
    return compute_score(code, gt, timeout=kw.pop("code_timeout", None), **kw)


def _score(code, gt, **kw):
    return compute_score_kw(f"Here you go:\n```python\n{code}```\nDone.", gt, **kw)


def _expect(out, score, pass_rate, failure, n):
    assert out == {"score": score, "pass_rate": pytest.approx(pass_rate), "failure": failure,
                   "verdict": verdict_of(failure), "num_tests": n, "num_passed": round(pass_rate * n)}  # fmt: skip


def test_stdio_pass_fail_crash_timeout_syntax():
    _expect(_score(ADD, STDIO), 1.0, 1.0, "none", 3)
    _expect(_score(ADD, json.dumps(STDIO)), 1.0, 1.0, "none", 3)  # ground truth as a JSON string
    # wrong on the case with a negative number only
    _expect(
        _score("a, b = map(int, input().split())\nprint(abs(a) + abs(b))\n", STDIO),
        0.0,
        2 / 3,
        "wrong_answer",
        3,
    )
    _expect(
        _score("a, b = map(int, input().split())\nprint(a // b + a + b - a // b)\n", STDIO),
        0.0,
        2 / 3,
        "runtime_error",
        3,
    )
    _expect(
        _score("while True:\n    pass\n", {"inputs": ["1 2"], "outputs": ["3"]}, code_timeout=1),
        0.0,
        0.0,
        "timeout",
        1,
    )
    _expect(_score("print(1 +)\n", STDIO), 0.0, 0.0, "syntax_error", 3)
    _expect(
        _score("x = bytearray(3 * 1024**3)\n", {"inputs": ["1 2"], "outputs": ["3"]}),
        0.0,
        0.0,
        "memory_limit",
        1,
    )


CALL = {"fn_name": "two_sum", "inputs": [[[2, 7, 11], 9], [[3, 3], 6]], "outputs": [[0, 1], [[0, 1]]]}


def test_call_based_function_and_solution_class():
    fn = "def two_sum(nums, t):\n    seen = {}\n    for i, x in enumerate(nums):\n        if t - x in seen:\n            return [seen[t - x], i]\n        seen[x] = i\n"
    _expect(_score(fn, CALL), 1.0, 1.0, "none", 2)
    cls = (
        "class Solution:\n    def two_sum(self, nums, t):\n        return (0, 1)\n"  # tuples compare as lists
    )
    _expect(_score(cls, CALL), 1.0, 1.0, "none", 2)
    _expect(_score("def two_sum(nums, t):\n    return [1, 0]\n", CALL), 0.0, 0.0, "wrong_answer", 2)
    _expect(_score("def two_sum(nums, t):\n    return nums[10]\n", CALL), 0.0, 0.0, "runtime_error", 2)
    _expect(
        _score("def two_sum(nums, t):\n    while True: pass\n", CALL, code_timeout=1), 0.0, 0.0, "timeout", 2
    )


def test_call_based_program_cannot_fake_a_verdict_by_exiting():
    _expect(
        _score("import os\ndef two_sum(nums, t):\n    print('[0, 1]')\n    os._exit(0)\n", CALL),
        0.0,
        0.0,
        "runtime_error",
        2,
    )


HUMANEVAL = {
    "test": "def check(candidate):\n    assert candidate(2, 3) == 5\n    assert candidate(-1, 1) == 0\n",
    "entry_point": "add",
}


def test_humaneval_style():
    _expect(_score("def add(a, b):\n    return a + b\n", HUMANEVAL), 1.0, 1.0, "none", 1)
    _expect(_score("def add(a, b):\n    return a * b\n", HUMANEVAL), 0.0, 0.0, "wrong_answer", 1)
    _expect(_score("def add(a, b):\n    return undefined_name\n", HUMANEVAL), 0.0, 0.0, "runtime_error", 1)
    _expect(
        _score("def add(a, b):\n    while True: pass\n", HUMANEVAL, code_timeout=1), 0.0, 0.0, "timeout", 1
    )
    # exiting before the check runs must not count as passing
    _expect(_score("import sys\nsys.exit(0)\n", HUMANEVAL), 0.0, 0.0, "runtime_error", 1)


MBPP = {"test_list": ["assert sq(2) == 4", "assert sq(3) == 9", "assert sq(-1) == 1"]}


def test_mbpp_style_pass_rate():
    _expect(_score("def sq(x):\n    return x * x\n", MBPP), 1.0, 1.0, "none", 3)
    _expect(_score("def sq(x):\n    return x * abs(x)\n", MBPP), 0.0, 2 / 3, "wrong_answer", 3)
    _expect(
        _score("def sq(x):\n    if x < 0: raise ValueError(x)\n    return x * x\n", MBPP),
        0.0,
        2 / 3,
        "runtime_error",
        3,
    )
    # a hang in the third test: the two before it still count
    _expect(
        _score("def sq(x):\n    while x < 0: pass\n    return x * x\n", MBPP, code_timeout=2),
        0.0,
        2 / 3,
        "timeout",
        3,
    )
    setup = {"test_list": ["assert f() == 3"], "test_setup_code": "import math\nK = 3"}
    _expect(_score("def f():\n    return K\n", setup), 1.0, 1.0, "none", 1)


def test_extract_code_and_output_comparison():
    assert extract_code("```py\na=1\n```\ntext\n```python\nb=2\n```") == "b=2\n"
    assert extract_code("no fences, just code\nx=1") == "no fences, just code\nx=1"
    assert extract_code("```python\nunclosed=1\n") == "unclosed=1\n"
    assert outputs_match("1 2 \n3\n\n", "1 2\n3")
    assert outputs_match("0.3333333", "0.33333333")
    assert not outputs_match("1 2", "1 3")


def test_bad_ground_truth_is_named():
    with pytest.raises(ValueError, match=r"keys \['foo'\]"):
        parse_ground_truth({"foo": 1})
    with pytest.raises(ValueError, match="not JSON"):
        parse_ground_truth("{not json")
    with pytest.raises(ValueError, match="2 inputs but 1 outputs"):
        parse_ground_truth({"inputs": ["1", "2"], "outputs": ["1"]})
