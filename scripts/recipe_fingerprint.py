"""Each recipe's CPU default, run by its smoke test, reduced to the numbers it trained to: a refactor's check
that every recipe still computes the same thing with the same seed.

    uv run --frozen python scripts/recipe_fingerprint.py record before.json      # on the old commit
    uv run --frozen python scripts/recipe_fingerprint.py record after.json       # on the new one
    uv run --frozen python scripts/recipe_fingerprint.py compare before.json after.json

``record`` runs ``recipes/*/tests/test_smoke.py`` (pytest, the workspace environment) and keeps the metrics
``Recipe.train`` returns in each test, without the keys that measure time, speed or memory. ``compare``
lists every key whose value differs, per test, and exits 1 if any does. fully_async is left out by default:
which samples its trainer gets depends on timing, so its numbers differ between two runs of one commit.
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: keys that measure the machine, not the algorithm
MACHINE_KEYS = re.compile(r"(^|/)(timing|perf/(throughput|time|max_memory|cpu_memory|mfu))|wall|_s$|seconds|memory")
NONDETERMINISTIC = ("fully_async",)


class Recorder:
    """A pytest plugin: wraps ``Recipe.train`` for the session and keeps what each test's calls returned."""

    def __init__(self) -> None:
        self.results: dict[str, list[dict[str, float]]] = {}
        self._test = ""

    def pytest_sessionstart(self, session) -> None:
        from verl.trainer.recipe_runner import Recipe

        original = Recipe.train
        recorder = self

        def train(recipe, argv):
            metrics = original(recipe, argv)
            kept = {k: float(v) for k, v in metrics.items() if not MACHINE_KEYS.search(k)}
            recorder.results.setdefault(recorder._test, []).append(kept)
            return metrics

        Recipe.train = train  # type: ignore[method-assign]

    def pytest_runtest_setup(self, item) -> None:
        self._test = item.nodeid


def smoke_tests() -> dict[str, str]:
    """Each recipe folder's name and its smoke test file."""
    return {Path(p).parts[-3]: p for p in sorted(glob.glob(str(ROOT / "recipes" / "*" / "tests" / "test_smoke.py")))}


def record(out: str, recipes: list[str]) -> int:
    import pytest

    paths = [path for name, path in smoke_tests().items() if name in recipes]
    recorder = Recorder()
    status = pytest.main([*paths, "-q", "-p", "no:cacheprovider"], plugins=[recorder])
    Path(out).write_text(json.dumps(recorder.results, indent=1, sort_keys=True))
    print(f"{sum(map(len, recorder.results.values()))} training runs of {len(recorder.results)} tests -> {out}")
    return int(status)


def compare(a: str, b: str) -> int:
    before, after = json.loads(Path(a).read_text()), json.loads(Path(b).read_text())
    differ = 0
    for test in sorted(set(before) | set(after)):
        if test not in before or test not in after:
            print(f"{test}: only in {'after' if test not in before else 'before'}")
            differ += 1
            continue
        runs = list(zip(before[test], after[test], strict=False))
        for i, (x, y) in enumerate(runs):
            keys = sorted(set(x) | set(y))
            changed = [k for k in keys if not _same(x.get(k), y.get(k))]
            for k in changed:
                print(f"{test} run {i}: {k}: {x.get(k)} -> {y.get(k)}")
            differ += bool(changed)
            print(f"{test} run {i}: {len(keys) - len(changed)} of {len(keys)} numbers equal")
    return 1 if differ else 0


def _same(x: float | None, y: float | None) -> bool:
    if x is None or y is None:
        return x is y
    return x == y or (math.isnan(x) and math.isnan(y))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record")
    r.add_argument("out")
    r.add_argument("--recipes", default=None, help="comma-separated recipe folders (default: all but fully_async)")
    c = sub.add_parser("compare")
    c.add_argument("before")
    c.add_argument("after")
    args = p.parse_args(argv)
    if args.cmd == "compare":
        return compare(args.before, args.after)
    chosen = args.recipes.split(",") if args.recipes else [r for r in smoke_tests() if r not in NONDETERMINISTIC]
    return record(args.out, chosen)


if __name__ == "__main__":
    sys.exit(main())
