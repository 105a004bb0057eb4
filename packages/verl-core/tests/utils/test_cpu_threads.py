"""The thread-count rule: CPUs from affinity and cgroup quota, threads from a worker's reservation."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from verl.utils import cpu_threads
from verl.utils.cpu_threads import apply_worker_threads, available_cpus, cgroup_cpu_limit, threads_for_cpus


def test_cgroup_v2_quota(tmp_path):
    (tmp_path / "cpu.max").write_text("150000 100000\n")
    assert cgroup_cpu_limit(tmp_path) == 1.5
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert cgroup_cpu_limit(tmp_path) is None


def test_cgroup_v1_quota(tmp_path):
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("300000\n")
    assert cgroup_cpu_limit(tmp_path) == 3.0
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")
    assert cgroup_cpu_limit(tmp_path) is None
    assert cgroup_cpu_limit(tmp_path / "missing") is None


def test_available_cpus_is_affinity_capped_by_quota(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(64)), raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 128)  # the host's count must not be used
    assert available_cpus(tmp_path) == 64  # no quota file: the affinity mask
    (tmp_path / "cpu.max").write_text("250000 100000\n")  # a container with --cpus=2.5
    assert available_cpus(tmp_path) == 3
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    assert available_cpus(tmp_path) == 2  # taskset to 2 CPUs: fewer than the quota


def test_threads_for_cpus(monkeypatch):
    monkeypatch.setattr(cpu_threads, "available_cpus", lambda: 8)
    assert threads_for_cpus(4.0) == 4
    assert threads_for_cpus(2.5) == 2
    assert threads_for_cpus(0.25) == 1  # a fractional share still runs one thread
    assert threads_for_cpus(16.0) == 8  # never more than the process may use
    with pytest.raises(ValueError, match="num_cpus must be > 0"):
        threads_for_cpus(0)


def _apply_in_fresh_process(reserved: float, omp: str | None, import_torch_first: bool) -> int:
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    if omp is not None:
        env["OMP_NUM_THREADS"] = omp
    code = (
        ("import torch\n" if import_torch_first else "")
        + "from verl.utils import cpu_threads\n"
        + "cpu_threads.available_cpus = lambda: 8\n"
        + f"cpu_threads.apply_worker_threads({reserved})\n"
        + "import torch\nprint(torch.get_num_threads())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return int(out.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(available_cpus() < 2, reason="needs 2 CPUs (torch caps its threads at the cores)")
@pytest.mark.parametrize("import_torch_first", [False, True])
def test_worker_threads_follow_the_reservation(import_torch_first):
    # Ray's own default for a 2-CPU actor is OMP_NUM_THREADS=2: the rule gives 2 threads either way
    assert _apply_in_fresh_process(2.0, "2", import_torch_first) == 2
    assert _apply_in_fresh_process(2.0, None, import_torch_first) == 2
    assert _apply_in_fresh_process(0.5, "1", import_torch_first) == 1
    # a value the user chose for the workers (not Ray's default for the reservation) wins
    assert _apply_in_fresh_process(2.0, "1", import_torch_first) == 1


def test_apply_returns_the_count_in_process(monkeypatch):
    import torch

    previous = torch.get_num_threads()
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(cpu_threads, "available_cpus", lambda: 1)
    try:
        assert apply_worker_threads(4.0) == 1 and torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(previous)


def test_worker_niceness_env_zero_unless_the_user_chose():
    assert cpu_threads.worker_niceness_env({}) == {"RAY_worker_niceness": "0"}
    assert cpu_threads.worker_niceness_env({"PATH": "/bin"}) == {"RAY_worker_niceness": "0"}
    assert cpu_threads.worker_niceness_env({"RAY_worker_niceness": "10"}) == {}


def test_worker_niceness_env_reads_this_process_by_default(monkeypatch):
    monkeypatch.setenv("RAY_worker_niceness", "5")
    assert cpu_threads.worker_niceness_env() == {}
    monkeypatch.delenv("RAY_worker_niceness")
    assert cpu_threads.worker_niceness_env() == {"RAY_worker_niceness": "0"}
