"""Run one section of the check in its own process, within a time limit, and keep what it produced.

A section (``section.py NAME ...``) writes its JSON result file after every sub-check, so a section
stopped at its limit still leaves the sub-checks it finished. Its output goes to a log file whose tail
the report keeps when the section fails, times out or records a failed sub-check.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
TAIL_CHARS = 4000


def tail(path: Path, chars: int = TAIL_CHARS) -> str:
    if not path.exists():
        return ""
    data = path.read_bytes()[-chars:]
    return data.decode("utf-8", errors="replace")


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM the section's whole process group (it may have spawned ranks), SIGKILL after 10 s."""
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def run_section(name: str, args: list[str], env: dict[str, str], work: Path, limit_s: float) -> dict:
    """Run ``section.py name args`` with ``limit_s`` seconds; returns the section's entry of the report."""
    work.mkdir(parents=True, exist_ok=True)
    result_file, log_file = work / f"{name}.json", work / f"{name}.log"
    result_file.unlink(missing_ok=True)
    cmd = [sys.executable, str(HERE / "section.py"), name, "--json", str(result_file), "--work", str(work / name),
           *args]
    child = run_child(cmd, log_file, limit_s, env)
    status = "ok" if child["status"] == "ok" else ("timeout" if child["status"].startswith("stopped") else "failed")
    entry = {"status": status, "seconds": child["seconds"], "limit_s": round(limit_s, 1)}
    if result_file.exists():
        entry.update(json.loads(result_file.read_text()))
    failed_checks = [k for k, v in entry.get("checks", {}).items() if v.get("status") not in ("ok", "skipped")]
    if status == "ok" and failed_checks:
        entry["status"] = "failed"
    if entry["status"] != "ok":
        entry["log_tail"] = tail(log_file)
        if status == "timeout":
            entry["error"] = f"stopped at its time limit of {limit_s:.0f} s"
    return entry


def run_child(cmd: list[str], log_file: Path, limit_s: float, env: dict[str, str] | None = None) -> dict:
    """Run ``cmd`` (output to ``log_file``) with ``limit_s`` seconds; its status, and the log's tail unless ok."""
    t0 = time.perf_counter()
    with log_file.open("w") as log:
        log.write(f"$ {' '.join(cmd)}\n")
        log.flush()
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            rc = proc.wait(timeout=limit_s)
            status = "ok" if rc == 0 else f"failed (exit {rc})"
        except subprocess.TimeoutExpired:
            _stop(proc)
            status = f"stopped at its limit of {limit_s:.0f} s"
    out = {"status": status, "seconds": round(time.perf_counter() - t0, 1)}
    if status != "ok":
        out["log_tail"] = tail(log_file)
    return out
