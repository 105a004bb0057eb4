"""The reaper SIGKILLs what a SIGKILLed driver started, including grandchildren reparented to init,
and nothing else."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="the reaper reads /proc (Linux)")


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_driver_killed_its_tree_is_ended(tmp_path):
    # The "driver" starts a child that starts a grandchild in a new session (as raylet starts its agents),
    # then the reaper, then writes the pids and sleeps.
    pids = tmp_path / "pids"
    driver_code = textwrap.dedent(f"""
        import subprocess, sys, time
        from verl.utils.reaper import start_reaper
        child = subprocess.Popen([sys.executable, "-c",
            "import subprocess, sys, time; g = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'],"
            " start_new_session=True); print(g.pid, flush=True); time.sleep(300)"], stdout=subprocess.PIPE, text=True)
        grandchild = int(child.stdout.readline())
        reaper = start_reaper()
        time.sleep(1.5)  # the reaper has seen the tree
        open({str(pids)!r}, "w").write(f"{{child.pid}} {{grandchild}} {{reaper.pid}}")
        time.sleep(300)
    """)
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    driver = subprocess.Popen([sys.executable, "-c", driver_code])
    try:
        deadline = time.monotonic() + 60
        while not pids.exists() or not pids.read_text():
            assert time.monotonic() < deadline and driver.poll() is None
            time.sleep(0.1)
        child, grandchild, reaper = map(int, pids.read_text().split())
        assert _alive(child) and _alive(grandchild) and _alive(reaper)
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait()
        deadline = time.monotonic() + 20
        while (_alive(child) or _alive(grandchild) or _alive(reaper)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(child) and not _alive(grandchild), "the killed driver's processes linger"
        assert not _alive(reaper), "the reaper should exit once done"
        assert bystander.poll() is None  # not the driver's: untouched
    finally:
        bystander.kill()
        if driver.poll() is None:
            driver.kill()
