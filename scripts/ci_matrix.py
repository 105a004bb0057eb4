#!/usr/bin/env python3
"""Which packages a change affects, and running their tests: the per-package CI matrix.

    python scripts/ci_matrix.py origin/main            # matrix for `git diff --name-only origin/main`
    python scripts/ci_matrix.py --paths packages/verl-core/src/verl/protocol.py
    python scripts/ci_matrix.py --all                  # every package (the full matrix)
    python scripts/ci_matrix.py --all --run [--frozen] [-- -x -m "not slow"]   # run: one pytest per entry
    python scripts/ci_matrix.py --package verl-core --run [--frozen]          # one package's entry
    python scripts/ci_matrix.py origin/main --json     # {"include": [{"package", "tests"}, ...]} for Actions

The dependency graph is read from the workspace: the root ``pyproject.toml``'s ``[tool.uv.workspace]
members`` globs give the packages, and each member's ``[project] dependencies`` (and optional
dependencies) that name another member give the edges. Rules for a changed path:

- inside a member's folder: that member and every member that depends on it, directly or not
  (a verl-core change runs workers, rewards, agent and every recipe);
- documentation (``docs/``, ``*.md``, ``*.rst``, ``LICENSE``): nothing;
- ``benchmarks/`` (measured by hand, never in CI): nothing;
- ``tests/`` and ``scripts/`` (the cross-package tests and what they test): the workspace tests;
  ``scripts/config_audit*`` also every recipe (each recipe's tests run its audit, ``test_config_audit.py``);
- anything else (root ``pyproject.toml``, ``uv.lock``, ``conftest.py``, ``.ci/``, ``.github/``, a path
  nobody claims): everything.

Every package change also runs the workspace tests (``tests/``: wheels, namespace, scaffolding), which
check how the packages fit together. With ``--run`` each entry runs from the repository root (so the root
conftest and pytest settings apply) as

    UV_PROJECT_ENVIRONMENT=.venvs/<name> uv run --exact --package <name> pytest <its tests dir>

in an environment of its own that holds exactly that package, its declared dependencies and its ``dev``
dependency group (its test dependencies, which may name its own extras): a package or recipe that
imports what it does not declare fails there. The workspace entry runs ``uv run --exact pytest tests``
in the workspace's environment (every member plus the root ``dev`` group). pytest's exit code 5 (no
tests collected, e.g. after ``-m`` deselects all) counts as a pass. Each entry's wall time is in the
summary. The exit status is 1 if any entry failed.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import re
import subprocess
import sys
import threading
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORKSPACE_TESTS = "workspace"  # the pseudo-package of the root tests/ folder
ENVS_DIR = ".venvs"  # one environment per package: .venvs/<name> (ignored by git)
DOC_PATTERNS = ("docs/*", "*.md", "*.rst", "LICENSE", "LICENSE.*", "NOTICE", ".gitignore")
NOTHING_PREFIXES = ("benchmarks/",)
WORKSPACE_PREFIXES = ("tests/", "scripts/")
RECIPES_DIR = "recipes/"
RECIPE_TOOLS = ("scripts/config_audit",)  # scripts that every recipe's own tests run (besides tests/)
NO_TESTS_COLLECTED = 5


@dataclass
class Package:
    name: str
    path: str  # relative to the root, posix
    deps: set[str] = field(default_factory=set)  # workspace members it depends on

    @property
    def tests(self) -> str:
        return f"{self.path}/tests"


def _req_name(req: str) -> str:
    """The normalized distribution name of a requirement string ("verl-core[tracking]>=0.1" -> verl-core)."""
    m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", req)
    if not m:
        raise ValueError(f"cannot read a package name from requirement {req!r}")
    return re.sub(r"[-_.]+", "-", m.group(1)).lower()


def load_workspace(root: Path = ROOT) -> dict[str, Package]:
    """Workspace members by name, with their in-workspace dependencies."""
    pyproject = root / "pyproject.toml"
    data = tomllib.loads(pyproject.read_text())
    try:
        globs = data["tool"]["uv"]["workspace"]["members"]
    except KeyError as e:
        raise KeyError(f"{pyproject} has no [tool.uv.workspace] members") from e
    raw: dict[str, tuple[str, list[str]]] = {}
    for pattern in globs:
        for member in sorted(root.glob(pattern)):
            file = member / "pyproject.toml"
            if not file.is_file():
                continue
            project = tomllib.loads(file.read_text()).get("project", {})
            if "name" not in project:
                raise KeyError(f"{file} has no [project] name")
            reqs = list(project.get("dependencies", []))
            for extra in project.get("optional-dependencies", {}).values():
                reqs += extra
            raw[_req_name(project["name"])] = (member.relative_to(root).as_posix(), reqs)
    return {
        name: Package(name, path, {_req_name(r) for r in reqs} & raw.keys() - {name})
        for name, (path, reqs) in raw.items()
    }


def dependents(packages: dict[str, Package], names: set[str]) -> set[str]:
    """``names`` plus every package that depends on one of them, transitively."""
    out = set(names)
    changed = True
    while changed:
        changed = False
        for pkg in packages.values():
            if pkg.name not in out and pkg.deps & out:
                out.add(pkg.name)
                changed = True
    return out


def _is_doc(path: str) -> bool:
    name = path.rsplit("/", 1)[-1]
    return any(fnmatch.fnmatch(path, p) or fnmatch.fnmatch(name, p) for p in DOC_PATTERNS)


def classify(path: str, packages: dict[str, Package]) -> set[str] | None:
    """What one changed path affects: a set of names (may be empty), or None for everything."""
    path = path.strip()
    path = path[2:] if path.startswith("./") else path
    for pkg in packages.values():
        if path.startswith(pkg.path + "/"):
            return set() if _is_doc(path) else dependents(packages, {pkg.name}) | {WORKSPACE_TESTS}
    if _is_doc(path):
        return set()
    if path.startswith(NOTHING_PREFIXES):
        return set()
    if path.startswith(RECIPE_TOOLS):
        return {p.name for p in packages.values() if p.path.startswith(RECIPES_DIR)} | {WORKSPACE_TESTS}
    if path.startswith(WORKSPACE_PREFIXES):
        return {WORKSPACE_TESTS}
    return None


def affected(paths: list[str], packages: dict[str, Package]) -> list[str]:
    """Sorted names affected by the changed ``paths`` (packages first, then the workspace tests)."""
    everything = set(packages) | {WORKSPACE_TESTS}
    out: set[str] = set()
    for path in paths:
        if not path.strip():
            continue
        hit = classify(path, packages)
        if hit is None:
            return _ordered(everything)
        out |= hit
    return _ordered(out)


def _ordered(names: set[str]) -> list[str]:
    return sorted(names - {WORKSPACE_TESTS}) + ([WORKSPACE_TESTS] if WORKSPACE_TESTS in names else [])


def matrix(names: list[str], packages: dict[str, Package], root: Path = ROOT) -> list[dict[str, str]]:
    """One entry per affected name that has a tests folder: ``{"package", "tests"}``."""
    rows = []
    for name in names:
        tests = "tests" if name == WORKSPACE_TESTS else packages[name].tests
        if (root / tests).is_dir():
            rows.append({"package": name, "tests": tests})
    return rows


def command(entry: dict[str, str], pytest_args: list[str], frozen: bool = False) -> list[str]:
    """The command that runs one matrix entry's tests (``frozen``: ``uv run --frozen``, as CI does).
    ``--exact`` removes whatever the environment holds beyond the entry's own closure."""
    uv = ["uv", "run", *(["--frozen"] if frozen else []), "--exact"]
    if entry["package"] == WORKSPACE_TESTS:
        return [*uv, "pytest", entry["tests"], *pytest_args]
    return [*uv, "--package", entry["package"], "pytest", entry["tests"], *pytest_args]


def environment(entry: dict[str, str], root: Path = ROOT, base: dict[str, str] | None = None) -> dict[str, str]:
    """The process environment of one entry: a package runs in ``.venvs/<name>`` (its own), the
    workspace tests in the workspace's ``.venv``. Python may write bytecode: a fresh environment's
    first import of torch then compiles it once instead of in every Ray worker process."""
    env = dict(os.environ if base is None else base)
    for key in ("VIRTUAL_ENV", "UV_PROJECT_ENVIRONMENT", "PYTHONDONTWRITEBYTECODE"):
        env.pop(key, None)
    if entry["package"] != WORKSPACE_TESTS:
        env["UV_PROJECT_ENVIRONMENT"] = str(root / ENVS_DIR / entry["package"])
    return env


def changed_paths(base: str, root: Path = ROOT) -> list[str]:
    """``git diff --name-only BASE`` (the working tree against BASE, uncommitted changes included)."""
    out = subprocess.run(["git", "diff", "--name-only", base], cwd=root, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"git diff --name-only {base} failed: {out.stderr.strip()}")
    return out.stdout.splitlines()


# pytest's closing line, e.g. "==== 1 failed, 573 passed, 1 skipped, 2 warnings in 725.52s ====".
_PYTEST_CLOSING = re.compile(r"\b\d+ (passed|failed|skipped|errors?|deselected)\b.* in [\d.]+s")
_PYTEST_COUNT = re.compile(r"(\d+) (passed|failed|skipped|errors?)\b")


def pytest_counts(line: str) -> dict[str, int]:
    """Counts from a pytest closing line (``{}`` for any other line); ``error``/``errors`` count as failed."""
    if not _PYTEST_CLOSING.search(line):
        return {}
    counts: dict[str, int] = {}
    for n, kind in _PYTEST_COUNT.findall(line):
        key = "failed" if kind.startswith("error") else kind
        counts[key] = counts.get(key, 0) + int(n)
    return counts


# pytest has printed its closing line, so the tests are over; a process still alive this long after it is
# held by a leftover non-daemon thread (e.g. a rank blocked in a collective whose peer failed): kill it
# and fail the entry instead of hanging the whole matrix.
EXIT_GRACE_S = 120


def run_entry(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> tuple[int, dict[str, int]]:
    """Run one entry's pytest, echoing its output; return its exit code and its closing-line counts."""
    counts: dict[str, int] = {}
    with subprocess.Popen(
        cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            sys.stdout.write(line)
            counts = pytest_counts(line) or counts
            if counts:
                break
        drain = threading.Thread(target=lambda: sys.stdout.writelines(proc.stdout), daemon=True)
        drain.start()
        try:
            proc.wait(timeout=EXIT_GRACE_S if counts else None)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            print(f"\nci_matrix: pytest did not exit {EXIT_GRACE_S} s after its summary (a thread left running); killed")
            sys.stdout.flush()
            return 1, counts
        drain.join(10)
    sys.stdout.flush()
    return proc.returncode, counts


def run(
    entries: list[dict[str, str]], pytest_args: list[str], root: Path = ROOT, frozen: bool = False
) -> int:
    """Run every entry (all of them, even after a failure); print a summary with each entry's wall time
    (environment sync included) and, last, one plain ``N passed, N failed, N skipped`` line over all
    entries; 0 if all passed."""
    results = []
    total = {"passed": 0, "failed": 0, "skipped": 0}
    for entry in entries:
        cmd = command(entry, pytest_args, frozen)
        env = environment(entry, root)
        where = env.get("UV_PROJECT_ENVIRONMENT", ".venv")
        print(f"\n=== {entry['package']}: {' '.join(cmd)}   (environment {where})", flush=True)
        start = time.monotonic()
        code, counts = run_entry(cmd, root, env)
        for key in total:
            total[key] += counts.get(key, 0)
        results.append((entry["package"], code, time.monotonic() - start))
    print("\n=== summary")
    failed = 0
    for name, code, seconds in results:
        ok = code in (0, NO_TESTS_COLLECTED)
        failed += not ok
        note = "no tests collected" if code == NO_TESTS_COLLECTED else f"exit {code}"
        print(f"  {'PASS' if ok else 'FAIL'}  {name} ({note}, {seconds:.0f} s)")
    print(f"{total['passed']} passed, {total['failed']} failed, {total['skipped']} skipped", flush=True)
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    pytest_args: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, pytest_args = argv[:cut], argv[cut + 1 :]
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("base", nargs="?", help="git ref to diff the working tree against")
    src.add_argument("--paths", nargs="+", help="changed paths, instead of asking git")
    src.add_argument("--all", action="store_true", help="every package (the full matrix)")
    src.add_argument("--package", help="one package's entry (or 'workspace' for the root tests/)")
    ap.add_argument("--json", action="store_true", help="print the GitHub Actions matrix as JSON")
    ap.add_argument("--run", action="store_true", help="run each entry's tests (pytest args after --)")
    ap.add_argument("--frozen", action="store_true", help="with --run: uv run --frozen (use uv.lock as is)")
    args = ap.parse_args(argv)

    packages = load_workspace()
    if args.all:
        names = _ordered(set(packages) | {WORKSPACE_TESTS})
    elif args.package:
        if args.package not in packages and args.package != WORKSPACE_TESTS:
            ap.error(f"unknown package {args.package!r}; known: {', '.join(sorted(packages))}, {WORKSPACE_TESTS}")
        names = [args.package]
    else:
        names = affected(args.paths if args.paths else changed_paths(args.base), packages)
    entries = matrix(names, packages)
    if args.json:
        print(json.dumps({"include": entries}))
    else:
        for e in entries:
            print(f"{e['package']}\t{e['tests']}")
        if not entries:
            print("nothing to test (documentation-only or no changes)", file=sys.stderr)
    if args.run:
        return run(entries, pytest_args, frozen=args.frozen)
    return 0


if __name__ == "__main__":
    sys.exit(main())
