"""Built-in procedural tasks, so the project can train without downloading data.

    python -m verl.utils.dataset.tasks --task arithmetic --train 2000 --test 200 --out DIR
    python -m verl.utils.dataset.tasks --task reasoning_gym/basic_arithmetic --train 500 --test 50 --out DIR

writes ``DIR/train.parquet`` and ``DIR/test.parquet`` in the RL row contract.
"""

from __future__ import annotations

import argparse
import json
import random
import zlib
from pathlib import Path
from typing import Any

from verl.utils.dataset.rows import write_parquet

OPS = ("+", "-", "*")
# One problem in TEST_BUCKETS lands in the test split: a fixed hash of the problem decides, so the two
# splits are disjoint whatever n and seed are.
TEST_BUCKETS = 10


def arithmetic_split(a: int, b: int, op: str) -> str:
    """``"test"`` or ``"train"``: the split problem ``a op b`` belongs to (a stable hash, not Python's)."""
    return "test" if zlib.crc32(f"{a}{op}{b}".encode()) % TEST_BUCKETS == 0 else "train"


def _operand_range(digits: int) -> tuple[int, int]:
    if digits < 1:
        raise ValueError(f"digits={digits} must be >= 1")
    return (0 if digits == 1 else 10 ** (digits - 1)), 10**digits - 1


def make_arithmetic_rows(
    n: int, seed: int, digits: int = 2, op: str = "+", split: str = "train"
) -> list[dict]:
    """``n`` distinct problems ``a<op>b=`` with ``digits``-digit operands, all from ``split``.

    Rows: ``data_source="arithmetic"``, ``prompt=[{"role": "user", "content": "23+45="}]``,
    ``reward_model={"style": "rule", "ground_truth": "68"}``, ``extra_info={"split", "index"}``.
    For ``-`` the larger operand comes first, so answers are never negative.
    """
    if op not in OPS:
        raise ValueError(f"op={op!r} is not one of {', '.join(OPS)}")
    if split not in ("train", "test"):
        raise ValueError(f"split={split!r} must be 'train' or 'test'")
    lo, hi = _operand_range(digits)
    rng = random.Random(f"arithmetic-{seed}-{digits}-{op}-{split}")
    seen: set[tuple[int, int]] = set()
    rows: list[dict] = []
    attempts, max_attempts = 0, 200 * n + 10_000
    while len(rows) < n:
        attempts += 1
        if attempts > max_attempts:
            space = (hi - lo + 1) ** 2
            raise ValueError(
                f"could only find {len(rows)} distinct {digits}-digit '{op}' problems for split {split!r} "
                f"(about {space // TEST_BUCKETS if split == 'test' else space - space // TEST_BUCKETS} exist); "
                f"asked for n={n}: use more digits or fewer problems"
            )
        a, b = rng.randint(lo, hi), rng.randint(lo, hi)
        if op == "-" and b > a:
            a, b = b, a
        if (a, b) in seen or arithmetic_split(a, b, op) != split:
            continue
        seen.add((a, b))
        answer = a + b if op == "+" else a - b if op == "-" else a * b
        rows.append(
            {
                "data_source": "arithmetic",
                "prompt": [{"role": "user", "content": f"{a}{op}{b}="}],
                "ability": "math",
                "reward_model": {"style": "rule", "ground_truth": str(answer)},
                "extra_info": {"split": split, "index": len(rows)},
            }
        )
    return rows


def make_reasoning_gym_rows(task_name: str, n: int, seed: int, split: str = "train") -> list[dict]:
    """``n`` rows of a reasoning-gym task (imported lazily), ``data_source="reasoning_gym/<task>"``.

    The ground truth is the task's answer; ``extra_info`` keeps ``question`` and ``metadata`` so the task's
    own scorer can be called with the full entry.
    """
    try:
        import reasoning_gym
    except ImportError as e:
        raise ImportError(
            "reasoning-gym tasks need the reasoning-gym package: pip install reasoning-gym"
        ) from e
    data = reasoning_gym.create_dataset(task_name, size=n, seed=seed)
    rows = []
    for i in range(n):
        entry = data[i]
        rows.append(
            {
                "data_source": f"reasoning_gym/{task_name}",
                "prompt": [{"role": "user", "content": entry["question"]}],
                "ability": "reasoning",
                "reward_model": {"style": "rule", "ground_truth": str(entry["answer"])},
                # JSON round trip: tuples -> lists, so the rows are plain data.
                "extra_info": {
                    "split": split,
                    "index": i,
                    "question": entry["question"],
                    "metadata": json.loads(json.dumps(entry.get("metadata", {}), default=str)),
                },
            }
        )
    return rows


def make_task_splits(task: str, n_train: int, n_test: int, seed: int, **kwargs: Any) -> dict[str, list[dict]]:
    """``{"train": rows, "test": rows}`` for ``arithmetic`` or ``reasoning_gym/<task>``, disjoint splits."""
    if task == "arithmetic":
        return {
            "train": make_arithmetic_rows(n_train, seed, split="train", **kwargs),
            "test": make_arithmetic_rows(n_test, seed, split="test", **kwargs),
        }
    if task.startswith("reasoning_gym/"):
        name = task.split("/", 1)[1]
        train = make_reasoning_gym_rows(name, n_train, seed, split="train")
        # A separate seed for test, then drop any question that also appears in train (small task spaces).
        seen = {r["prompt"][0]["content"] for r in train}
        pool = make_reasoning_gym_rows(name, 3 * n_test + 10, seed + 1_000_003, split="test")
        test = [r for r in pool if r["prompt"][0]["content"] not in seen][:n_test]
        for i, r in enumerate(test):
            r["extra_info"]["index"] = i
        return {"train": train, "test": test}
    raise ValueError(f"unknown task {task!r}; use 'arithmetic' or 'reasoning_gym/<task name>'")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", default="arithmetic", help="arithmetic | reasoning_gym/<task>")
    p.add_argument("--train", type=int, default=2000, help="number of training prompts")
    p.add_argument("--test", type=int, default=200, help="number of test prompts")
    p.add_argument("--out", required=True, help="output directory (train.parquet, test.parquet)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--digits", type=int, default=2, help="arithmetic: digits per operand")
    p.add_argument("--op", default="+", choices=OPS, help="arithmetic: operator")
    args = p.parse_args(argv)
    kwargs = {"digits": args.digits, "op": args.op} if args.task == "arithmetic" else {}
    splits = make_task_splits(args.task, args.train, args.test, args.seed, **kwargs)
    for name, rows in splits.items():
        path = write_parquet(rows, Path(args.out) / f"{name}.parquet")
        print(f"wrote {len(rows)} {args.task} rows to {path}")


if __name__ == "__main__":
    main()
