"""Code scorer: run the model's program against the problem's tests in a sandbox.

``solution_str`` is model output: the last fenced code block is used, or the raw text when there is
none. ``ground_truth`` (a dict or its JSON string) is one of

- ``{"inputs": [...], "outputs": [...]}``: stdin/stdout cases; with ``"fn_name"`` the cases are calls
  ``fn_name(*inputs[i]) == outputs[i]`` (a function, or a method of class ``Solution``);
- ``{"test": "<defines check(candidate)>", "entry_point": "<name>"[, "prompt"]}``: HumanEval style;
  ``prompt`` (HumanEval's) defines the helpers some tests call (``poly``, ``encode_cyclic``): the
  tests get them from there, never from the solution;
- ``{"test_list": ["assert ...", ...]}`` (optional ``test_setup_code``, ``test_imports``): MBPP style.

Function-call tests run in `sandbox_harness`'s judge, apart from the solution: only plain data
crosses, and comparisons run where the solution cannot reach (see the verl-rewards README for the
tricks this defends against). stdin/stdout output is compared here, in the scorer's process.

Returns ``{"score": 1.0 if every test passes else 0.0, "pass_rate", "failure", "verdict",
"num_tests", "num_passed"}`` where ``failure`` is ``hack`` when any test caught one, else the first
failing test's kind: ``none``, ``syntax_error``, ``wrong_answer``, ``runtime_error``, ``timeout``,
``memory_limit`` or ``sandbox_error``; ``verdict`` is its coarse kind (`verdicts.VERDICTS`).
"""

from __future__ import annotations

import json
import math
import re
import secrets
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from verl.rewards.sandbox import RunResult, Sandbox, base, get_sandbox
from verl.rewards.scoring import sandbox_harness
from verl.rewards.scoring.code_harness import (
    HARNESS_EXIT,
    SYNTAX_EXIT,
    call_stdin,
    judged_program,
    stdio_program,
    tests_stdin,
)
from verl.rewards.scoring.verdicts import verdict_of

_FENCE = re.compile(r"```[ \t]*[\w+#.-]*[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL)

DEFAULT_CASE_TIMEOUT = 5.0
DEFAULT_PROGRAM_TIMEOUT = 15.0  # for assert-style programs, which run every test in one process


def extract_code(solution_str: str) -> str:
    """The last fenced block (an unclosed final fence runs to the end), else the whole text."""
    blocks = _FENCE.findall(solution_str)
    return blocks[-1] if blocks else solution_str


def parse_ground_truth(ground_truth: Any) -> dict:
    if isinstance(ground_truth, str):
        try:
            ground_truth = json.loads(ground_truth)
        except json.JSONDecodeError as e:
            raise ValueError(
                f"code ground truth is a string but not JSON ({e}): {ground_truth[:200]!r}"
            ) from e
    if not isinstance(ground_truth, dict):
        raise ValueError(
            f"code ground truth must be a dict or its JSON string, got {type(ground_truth).__name__}"
        )
    if "inputs" in ground_truth and "outputs" in ground_truth:
        if len(ground_truth["inputs"]) != len(ground_truth["outputs"]):
            raise ValueError(
                f"code ground truth has {len(ground_truth['inputs'])} inputs but {len(ground_truth['outputs'])} outputs"
            )
        return ground_truth
    if "test" in ground_truth and "entry_point" in ground_truth:
        return ground_truth
    if "test_list" in ground_truth:
        return ground_truth
    raise ValueError(
        "code ground truth must have keys {inputs, outputs[, fn_name]}, {test, entry_point} or {test_list}; "
        f"got keys {sorted(ground_truth)}"
    )


def _kind(res: RunResult) -> str:
    if res.status == base.TIMEOUT:
        return "timeout"
    if res.status == base.MEMORY:
        return "memory_limit"
    if res.status == base.SANDBOX_ERROR or res.exit_code == HARNESS_EXIT:
        return "sandbox_error"
    if res.exit_code == SYNTAX_EXIT:
        return "syntax_error"
    if res.status != base.OK:
        return "runtime_error"
    return "none"


def _floats_close(a: str, b: str) -> bool:
    try:
        x, y = float(a), float(b)
    except ValueError:
        return False
    return math.isclose(x, y, rel_tol=1e-6, abs_tol=1e-6)


def outputs_match(got: str, want: str) -> bool:
    """Line-wise equality ignoring trailing whitespace, else token-wise with float tolerance."""
    g = [line.rstrip() for line in got.strip().splitlines()]
    w = [line.rstrip() for line in want.strip().splitlines()]
    if g == w:
        return True
    gt, wt = got.split(), want.split()
    return len(gt) == len(wt) and all(a == b or _floats_close(a, b) for a, b in zip(gt, wt))


def _values_match(got: Any, want: Any) -> bool:
    """``got`` (exactly builtin types, decoded in this process) equals the expected JSON value: floats
    within 1e-6, tuples as lists (JSON has none), a number never equal to a string."""
    if type(got) is tuple:
        got = list(got)
    if type(want) is float or type(got) is float:
        numbers = (int, float)
        return (
            type(got) in numbers
            and type(want) in numbers
            and math.isclose(got, want, rel_tol=1e-6, abs_tol=1e-6)
        )
    if type(got) is list and type(want) is list:
        return len(got) == len(want) and all(_values_match(g, w) for g, w in zip(got, want))
    return type(got) is type(want) and got == want


def _stdin_text(x: Any) -> str:
    return "\n".join(map(str, x)) if isinstance(x, list) else str(x)


def _run_stdio_case(sandbox: Sandbox, code: str, inp: Any, out: Any, timeout: float, memory_mb) -> str:
    res = sandbox.run(stdio_program(code), _stdin_text(inp), timeout=timeout, memory_mb=memory_mb)
    kind = _kind(res)
    if kind != "none":
        return kind
    return "none" if outputs_match(res.stdout, _stdin_text(out)) else "wrong_answer"


def _verdict_lines(res: RunResult, token: str) -> list[str]:
    """The judge's lines (what follows the token) in the program's stdout; only the judge writes there."""
    prefix = token + " "
    return [ln[len(prefix) :] for ln in res.stdout.splitlines() if ln.startswith(prefix)]


def _run_call_case(
    sandbox: Sandbox, code: str, fn: str, args: Any, want: Any, timeout: float, memory_mb
) -> str:
    token = secrets.token_hex(16)
    args = args if isinstance(args, list) else [args]
    res = sandbox.run(judged_program(code), call_stdin(token, fn, args), timeout=timeout, memory_mb=memory_mb)
    lines = _verdict_lines(res, token)
    if not lines:  # the program died before the call returned
        kind = _kind(res)
        return "runtime_error" if kind == "none" else kind
    head, _, rest = lines[-1].partition(" ")
    if head == "hack":
        return "hack"
    if head != "result":
        return "runtime_error"
    got = sandbox_harness.decode(json.loads(rest))
    ok = _values_match(got, want) or (
        isinstance(want, list) and len(want) == 1 and _values_match(got, want[0])
    )
    return "none" if ok else "wrong_answer"


_TEST_VERDICTS = {"ok": "none", "fail": "wrong_answer", "error": "runtime_error", "hack": "hack"}


def _run_tests(
    sandbox: Sandbox, code: str, tests: list[str], timeout: float, memory_mb, **spec: Any
) -> list[str]:
    token = secrets.token_hex(16)
    res = sandbox.run(
        judged_program(code), tests_stdin(token, tests, **spec), timeout=timeout, memory_mb=memory_mb
    )
    verdicts: dict[int, str] = {}
    for line in _verdict_lines(res, token):
        parts = line.split()
        if len(parts) == 2 and parts[0].isdigit():
            verdicts[int(parts[0])] = _TEST_VERDICTS.get(parts[1], "runtime_error")
    # Tests without a verdict did not run: the program died first (syntax error, crash, limit).
    died = _kind(res)
    if died == "none":
        died = "runtime_error"
    return [verdicts.get(i, died) for i in range(len(tests))]


def compute_score(
    solution_str: str,
    ground_truth: Any,
    extra_info: dict | None = None,
    sandbox: Sandbox | str | None = None,
    sandbox_options: dict | None = None,
    timeout: float | None = None,
    memory_mb: int | None = None,
    max_workers: int = 4,
) -> dict:
    """Score one program; see the module docstring for formats and result keys.

    ``sandbox`` is a `Sandbox`, a registered sandbox name, or None for the local one (built with
    ``sandbox_options``, e.g. ``{"url": ...}`` for sandbox_fusion); ``timeout`` is per case
    (stdin/stdout and call-based) or per program (assert-based).
    """
    gt = parse_ground_truth(ground_truth)
    if sandbox is None or isinstance(sandbox, str):
        sandbox = get_sandbox(sandbox or "local", **(sandbox_options or {}))
    code = extract_code(solution_str)
    if "test_list" in gt:
        setup = "\n".join(x for x in (*(gt.get("test_imports") or ()), gt.get("test_setup_code")) if x)
        kinds = _run_tests(
            sandbox, code, list(gt["test_list"]), timeout or DEFAULT_PROGRAM_TIMEOUT, memory_mb, setup=setup
        )
    elif "test" in gt:
        test = f"{gt['test']}\ncheck({gt['entry_point']})\n"
        kinds = _run_tests(
            sandbox, code, [test], timeout or DEFAULT_PROGRAM_TIMEOUT, memory_mb,
            prompt=gt.get("prompt") or "", entry_point=gt["entry_point"],
        )  # fmt: skip
    else:
        cases = list(zip(gt["inputs"], gt["outputs"]))
        t = timeout or DEFAULT_CASE_TIMEOUT
        fn = gt.get("fn_name")

        def one(case):
            if fn:
                return _run_call_case(sandbox, code, fn, case[0], case[1], t, memory_mb)
            return _run_stdio_case(sandbox, code, case[0], case[1], t, memory_mb)

        with ThreadPoolExecutor(max(1, min(max_workers, len(cases)))) as ex:
            kinds = list(ex.map(one, cases))
    n = len(kinds)
    passed = sum(k == "none" for k in kinds)
    # A refused hack outranks every other failure: it is what the run's metrics must show.
    failure = "hack" if "hack" in kinds else next((k for k in kinds if k != "none"), "none")
    return {
        "score": 1.0 if n and passed == n else 0.0,
        "pass_rate": passed / n if n else 0.0,
        "failure": failure,
        "verdict": verdict_of(failure),
        "num_tests": n,
        "num_passed": passed,
    }
