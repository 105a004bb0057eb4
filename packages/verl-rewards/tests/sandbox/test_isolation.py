import logging

import pytest
from verl.rewards.sandbox import SANDBOXES, get_sandbox
from verl.rewards.sandbox.isolation import probe

from .levels import available


def test_weak_level_is_announced_loudly(caplog):
    with caplog.at_level(logging.WARNING, logger="verl.rewards.sandbox.isolation"):
        iso = probe("rlimits")
    assert iso.level == "rlimits"
    assert "WEAK" in caplog.text and "NETWORK" in caplog.text and "bubblewrap" in caplog.text


def test_rlimits_level_still_limits_time_and_memory():
    sb = get_sandbox("local", isolation="rlimits", timeout=1)
    assert sb.run("while True: pass").status == "timeout"
    assert sb.run("x = bytearray(4 * 1024**3)").status == "memory_limit"


def test_unknown_level_and_sandbox_names_are_errors():
    with pytest.raises(ValueError, match="'auto' or one of"):
        probe("docker")
    with pytest.raises(KeyError, match="sandbox_fusion"):
        SANDBOXES.get("sandbox-fusion")


def test_auto_never_falls_back_to_rlimits(monkeypatch):
    """Without bubblewrap and user namespaces, code rewards are refused unless rlimits is asked for by name."""
    import shutil

    from verl.rewards.sandbox import isolation

    assert probe("auto").level in ("bwrap", "namespaces")
    real_which = shutil.which
    monkeypatch.setattr(
        isolation.shutil, "which", lambda name, **kw: None if name in ("bwrap", "unshare") else real_which(name, **kw)
    )
    with pytest.raises(RuntimeError, match=r"reward.sandbox.isolation=rlimits by name") as err:
        probe("auto")
    assert "bwrap: not installed" in str(err.value) and "namespaces: no unshare tool" in str(err.value)
    assert probe("rlimits").level == "rlimits"




@pytest.mark.parametrize("level", [lvl for lvl in ("bwrap", "namespaces", "rlimits") if available(lvl)])
@pytest.mark.parametrize("timeout", [30, 1], ids=["exits", "times_out"])
def test_a_background_child_does_not_outlive_its_run(level, timeout):
    """A double-forked, setsid'ed child (out of the program's process group, its command line marked
    with a one-time token) is gone when run() returns: the pid namespace takes it down at the
    confining levels, the reaper at rlimits, and at the time limit every process under the sandbox
    is killed and waited for."""
    import secrets

    from verl.rewards.sandbox.local import LocalSandbox

    marker = secrets.token_hex(8)
    daemon = (
        "import os, sys\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
        f"        os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep(120)', '{marker}'])\n"
        "    os._exit(0)\nos.wait()\nimport time; time.sleep(0.5)\nprint('parent done', flush=True)\n"
    )
    sb = LocalSandbox(isolation=level, timeout=timeout)
    res = sb.run(daemon + ("while True: pass\n" if timeout == 1 else ""))
    assert res.status == ("ok" if timeout == 30 else "timeout"), res
    assert _live_with(marker) == []


def _live_with(marker: str) -> list[str]:
    import os

    found = []
    for pid in os.listdir("/proc"):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if marker.encode() in f.read() and pid != str(os.getpid()):
                    with open(f"/proc/{pid}/stat") as f:
                        if f.read().rsplit(")", 1)[1].split()[0] != "Z":
                            found.append(pid)
        except OSError:
            pass
    return found


@pytest.mark.skipif(__import__("os").getuid() != 0, reason="the sandbox switches users only when run as root")
def test_rlimits_programs_at_once_each_have_their_own_processes_limit_and_uid():
    """40 programs at once (more than RLIMIT_NPROC's 32) each start a child: with one shared sandbox user
    the limit counts all of them and most forks fail (EAGAIN); each program runs as a uid of its own."""
    import os
    import shutil
    import tempfile
    from concurrent.futures import ThreadPoolExecutor

    from verl.rewards.sandbox.local import LocalSandbox
    from verl.rewards.sandbox.uids import UID_BASE, UID_COUNT

    n = 40
    meet = tempfile.mkdtemp(prefix="verl-sbx-meet-")  # the rlimits level sees the filesystem: programs meet here
    os.chmod(meet, 0o1777)
    sb = LocalSandbox(isolation="rlimits", max_concurrent=n, max_processes=32, timeout=60)
    program = (
        "import os, time\n"
        f"open(os.path.join({meet!r}, str(os.getpid())), 'w').close()\n"
        f"while len(os.listdir({meet!r})) < {n}:  # every program is running now\n"
        "    time.sleep(0.05)\n"
        "pid = os.fork()\nif pid == 0:\n    os._exit(0)\nos.wait()\nprint(os.getuid())\n"
    )
    try:
        with ThreadPoolExecutor(n) as pool:
            results = list(pool.map(lambda _: sb.run(program), range(n)))
    finally:
        shutil.rmtree(meet)
    assert [r.status for r in results] == ["ok"] * n, [r.stderr[-300:] for r in results if r.status != "ok"][:2]
    uids = [int(r.stdout) for r in results]
    assert all(UID_BASE <= u < UID_BASE + UID_COUNT for u in uids)
    assert len(set(uids)) == n  # all 40 were alive together


@pytest.mark.skipif(__import__("os").getuid() != 0, reason="the sandbox switches users only when run as root")
def test_rlimits_refuses_to_run_a_program_as_an_existing_account(monkeypatch):
    from verl.rewards.sandbox import uids
    from verl.rewards.sandbox.local import LocalSandbox

    monkeypatch.setattr(uids, "UID_BASE", 0)  # uid 0 is root's account
    with pytest.raises(RuntimeError, match=r"uid 0 belongs to account 'root'"):
        LocalSandbox(isolation="rlimits").run("print(1)")
