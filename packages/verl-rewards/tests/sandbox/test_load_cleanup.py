"""256 programs at once through the local sandbox (the load benchmark's mix: fast, slow, crashing,
looping and ones that leave a double-forked background child) leave no process and no file behind,
and each ends as its kind must. Run in a child process: the benchmark makes itself a child subreaper
(so escaped children stay visible), which the test session must not become."""

import json
import pathlib
import subprocess
import sys

import pytest

SCRIPT = pathlib.Path(__file__).parents[2] / "benchmarks" / "sandbox_load.py"


@pytest.mark.slow
def test_256_concurrent_programs_leave_nothing_behind(tmp_path):
    out = tmp_path / "load.json"
    cmd = [sys.executable, str(SCRIPT), "--levels", "auto", "--concurrency", "256", "--per-slot", "1",
           "--no-fusion", "--timeout", "300", "--json", str(out)]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    results = json.loads(out.read_text())
    if not results:
        pytest.skip(f"no confining isolation level here: {proc.stdout[-500:]}")
    (r,) = results
    assert (r["concurrency"], r["programs"]) == (256, 256)
    assert r["wrong"] == 0, r["wrong_detail"]
    assert r["left_processes"] == 0, r["left_detail"]
    assert r["left_dirs"] == 0
    assert r["fds_after"] == r["fds_before"]
    assert r["peak_fds"] > r["fds_before"]  # the sampler saw the runs in flight
