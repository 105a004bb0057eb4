"""Section ``gpu_tests``: every test marked ``gpu`` in the repository, through pytest (they skip on CPU).

The files are found by their marker (``mark.gpu``), so a GPU test added later runs here without an
edit. Counts come from pytest's JUnit XML; each failure keeps its message.
"""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from context import ROOT, Context, Recorder

TEST_ROOTS = ("packages", "recipes", "tests")


def gpu_test_files() -> list[str]:
    files = []
    for top in TEST_ROOTS:
        for path in sorted((ROOT / top).rglob("test_*.py")):
            if "mark.gpu" in path.read_text(errors="replace"):
                files.append(str(path.relative_to(ROOT)))
    return files


def run_pytest(files: list[str], work: Path, seconds: float) -> dict:
    junit = work / "junit.xml"
    cmd = [sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-rA", "-p", "no:cacheprovider",
           f"--junitxml={junit}", *files]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=max(seconds, 10))
    print(proc.stdout[-6000:], proc.stderr[-3000:], flush=True)
    if not junit.exists():
        raise RuntimeError(f"pytest wrote no report (exit {proc.returncode}):\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    tests = []
    for case in ET.parse(junit).getroot().iter("testcase"):
        outcome, message = "passed", ""
        for kind in ("failure", "error", "skipped"):
            node = case.find(kind)
            if node is not None:
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[kind]
                message = (node.get("message") or node.text or "")[:1500]
        tests.append({"test": f"{case.get('classname')}::{case.get('name')}", "outcome": outcome,
                      "seconds": float(case.get("time", 0)), "message": message})
    counts = {k: sum(t["outcome"] == k for t in tests) for k in ("passed", "failed", "error", "skipped")}
    if counts["failed"] or counts["error"] or proc.returncode not in (0,):
        raise AssertionError(f"pytest exit {proc.returncode}: {counts}; " + "; ".join(
            f"{t['test']}: {t['message'][:300]}" for t in tests if t["outcome"] in ("failed", "error")))
    return {"files": files, **counts, "tests": tests}


def run(ctx: Context, rec: Recorder) -> None:
    files = gpu_test_files()
    rec.set("files", files)
    rec.check("pytest -m gpu", lambda: run_pytest(files, ctx.work, ctx.seconds_left() - 5))
