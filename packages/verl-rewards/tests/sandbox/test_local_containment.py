"""Attacks a model-written program might make, run through the local sandbox at every confining
isolation level this machine supports (``bwrap`` when bubblewrap is installed, ``namespaces``, which
needs only util-linux: forced here even where bwrap exists, so the no-bubblewrap path is tested).
Each must be contained, leave the test process unharmed, leave no process behind, and be described
by the result."""

import os
import shutil
import socket
import threading
import time

import pytest
from verl.rewards.sandbox import base
from verl.rewards.sandbox.local import LocalSandbox

from .levels import available

LEVELS = [
    pytest.param(
        lvl,
        marks=pytest.mark.skipif(
            (lvl == "bwrap" and shutil.which("bwrap") is None) or not available(lvl),
            reason=f"{lvl} isolation unavailable",
        ),
    )
    for lvl in ("bwrap", "namespaces")
]


@pytest.fixture(scope="module", params=LEVELS)
def sandbox(request):
    return LocalSandbox(timeout=5, memory_mb=512, max_processes=32, max_file_mb=4, isolation=request.param)


def _fs_confined(sandbox) -> bool:
    """Both levels give the program a minimal root of its own: the host's files are out of reach."""
    return sandbox.isolation.level in ("bwrap", "namespaces")


def _pids_with(marker: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if marker.encode() in f.read():
                        found.append(int(entry))
            except OSError:
                pass
    return found


def test_normal_program_runs(sandbox):
    res = sandbox.run("import sys\nprint(sum(map(int, sys.stdin.read().split())))", "1 2 3")
    assert res.status == base.OK and res.stdout.strip() == "6"
    assert res.isolation == sandbox.isolation.level


def test_infinite_loop_times_out_and_is_killed(sandbox):
    marker = "987.654321"
    # The loop runs in a child in its own session too, to check the whole tree goes.
    code = (
        "import subprocess, os\n"
        f"subprocess.Popen(['/bin/sleep', '{marker}'], start_new_session=True)\n"
        "while True: pass\n"
    )
    res = sandbox.run(code, timeout=1.5)
    assert res.status == base.TIMEOUT
    assert any("limit" in n for n in res.notes)
    time.sleep(0.2)
    assert _pids_with(marker) == []


def test_background_children_do_not_survive_a_normal_exit(sandbox):
    marker = "876.543219"
    code = (
        "import os, subprocess\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        f"    os.execv('/bin/sleep', ['/bin/sleep', '{marker}'])\n"
        "print('parent done')\n"
    )
    res = sandbox.run(code)
    assert res.status == base.OK and "parent done" in res.stdout
    time.sleep(0.2)
    assert _pids_with(marker) == []


def test_fork_bomb_is_capped_and_leaves_nothing(sandbox):
    marker = "765.432198"
    code = (
        "import os\n"
        "n = 0\n"
        "try:\n"
        "    while True:\n"
        "        if os.fork() == 0:\n"
        f"            os.execv('/bin/sleep', ['/bin/sleep', '{marker}'])\n"
        "        n += 1\n"
        "except OSError as e:\n"
        "    print('forks', n, type(e).__name__)\n"
    )
    res = sandbox.run(code, timeout=10)
    assert res.status == base.OK, res
    forks = int(res.stdout.split()[1])
    assert forks < 32  # RLIMIT_NPROC=32 (threads of the sandbox's processes count too)
    assert "BlockingIOError" in res.stdout
    time.sleep(0.2)
    assert _pids_with(marker) == []


def test_memory_bomb_hits_the_limit(sandbox):
    res = sandbox.run("x = bytearray(2 * 1024**3)\nprint('allocated')")
    assert res.status == base.MEMORY
    assert "allocated" not in res.stdout
    assert res.notes == ["memory limit reached (allocation refused)"]


def test_huge_file_write_is_cut_at_the_file_size_limit(sandbox):
    code = "f = open('big.bin', 'wb')\nchunk = b'x' * (1 << 20)\nfor _ in range(100):\n    f.write(chunk)\n    f.flush()\n"
    res = sandbox.run(code)
    assert res.status == base.ERROR
    assert "file-size limit reached" in res.notes
    assert "File too large" in res.stderr


def test_parent_environment_is_not_visible(sandbox, monkeypatch):
    secret = "sk-verl-test-" + "9" * 12
    monkeypatch.setenv("VERL_TEST_SECRET", secret)
    code = (
        "import os\n"
        "print(sorted(os.environ))\n"
        f"for pid in (1, {os.getpid()}, {os.getppid()}):\n"
        "    try:\n"
        "        print(open(f'/proc/{pid}/environ', 'rb').read())\n"
        "    except OSError as e:\n"
        "        print('denied', pid, type(e).__name__)\n"
    )
    res = sandbox.run(code)
    assert res.status == base.OK
    assert secret not in res.stdout
    assert "VERL_TEST_SECRET" not in res.stdout
    # Constants only: nothing copied from the trainer's environment.
    assert "VIRTUAL_ENV" not in res.stdout and "HOSTNAME" not in res.stdout


def test_writing_outside_the_work_dir_fails(sandbox, tmp_path):
    target = tmp_path / "owned.txt"
    code = (
        f"try:\n    open({str(target)!r}, 'w').write('pwned')\n    print('wrote')\n"
        "except OSError as e:\n    print('refused', type(e).__name__)\n"
    )
    res = sandbox.run(code)
    assert res.status == base.OK
    if _fs_confined(sandbox):
        assert "refused" in res.stdout
        assert not target.exists()
    else:
        # Documented weaker guarantee: same user, host filesystem visible, so the write goes through.
        assert "wrote" in res.stdout


def test_reading_a_planted_private_file_fails(sandbox, tmp_path):
    planted = tmp_path / "secret.txt"
    planted.write_text("TOP-SECRET-CONTENT")
    planted.chmod(0o600)
    code = (
        f"try:\n    print(open({str(planted)!r}).read())\n"
        "except OSError as e:\n    print('refused', type(e).__name__)\n"
    )
    res = sandbox.run(code)
    if _fs_confined(sandbox):
        assert "TOP-SECRET-CONTENT" not in res.stdout
        assert "refused" in res.stdout
    else:
        assert "TOP-SECRET-CONTENT" in res.stdout  # documented weaker guarantee (see README)


def test_world_readable_file_outside_is_hidden(sandbox):
    d = "/tmp/verl-sbx-planted"
    os.makedirs(d, exist_ok=True)
    os.chmod(d, 0o755)
    path = os.path.join(d, "public.txt")
    with open(path, "w") as f:
        f.write("WORLD-READABLE")
    os.chmod(path, 0o644)
    res = sandbox.run(
        f"try:\n    print(open({path!r}).read())\nexcept OSError as e:\n    print('refused', type(e).__name__)\n"
    )
    # e.g. a dataset's answers in a 0644 file: a reward-hacking hole if the program could read it
    assert "WORLD-READABLE" not in res.stdout and "refused" in res.stdout


def test_only_the_minimal_root_is_visible(sandbox):
    res = sandbox.run(
        "import os\n"
        "print(sorted(os.listdir('/')))\n"
        "for p in ('/etc/passwd', '/root', '/home', '/work', '/proc/1/root/etc/passwd'):\n"
        "    try:\n"
        "        print(p, 'VISIBLE', len(os.listdir(p) if os.path.isdir(p) else open(p).read()))\n"
        "    except OSError as e:\n"
        "        print(p, 'refused', type(e).__name__)\n"
    )
    assert res.status == base.OK, res
    top = set(eval(res.stdout.splitlines()[0]))
    assert top <= {"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "sandbox", "tmp", "proc", "dev",
                   ".oldroot", "etc", "run", "var", "home", "root"} and "sandbox" in top
    assert "VISIBLE" not in res.stdout


def test_no_mount_remount_or_chroot_escape(sandbox):
    code = (
        "import os, subprocess\n"
        "for args in (['mount', '-o', 'remount,bind,rw', '/usr'], ['mount', '-t', 'tmpfs', 'x', '/tmp'],\n"
        "             ['umount', '-l', '/sandbox']):\n"
        "    r = subprocess.run(args, capture_output=True, text=True)\n"
        "    print(args[0], 'rc', r.returncode)\n"
        "try:\n"
        "    os.mkdir('/tmp/x'); os.chroot('/tmp/x'); print('chroot DONE')\n"
        "except OSError as e:\n"
        "    print('chroot refused', type(e).__name__)\n"
        "try:\n"
        "    open('/usr/pwned', 'w'); print('usr WRITTEN')\n"
        "except OSError as e:\n"
        "    print('usr refused', type(e).__name__)\n"
        "print(open('/proc/self/status').read().split('CapEff:')[1].split()[0])\n"
    )
    res = sandbox.run(code)
    assert res.status == base.OK, res
    lines = res.stdout.splitlines()
    assert lines[:3] == ["mount rc 32", "mount rc 32", "umount rc 32"] or all(" rc 0" not in ln for ln in lines[:3])
    assert "chroot refused PermissionError" in res.stdout and "usr refused" in res.stdout
    assert lines[-1] == "0000000000000000"  # no effective capabilities


def test_no_network_to_a_local_listener(sandbox):
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    srv.settimeout(1)
    port = srv.getsockname()[1]
    accepted = []

    def accept():
        try:
            conn, _ = srv.accept()
            accepted.append(conn)
        except OSError:
            pass

    t = threading.Thread(target=accept)
    t.start()
    code = (
        "import socket\n"
        "try:\n"
        f"    s = socket.create_connection(('127.0.0.1', {port}), timeout=2)\n"
        "    print('connected')\n"
        "except OSError as e:\n"
        "    print('blocked', type(e).__name__)\n"
    )
    res = sandbox.run(code)
    t.join()
    srv.close()
    assert "blocked" in res.stdout
    assert accepted == []


def test_killing_the_parent_fails(sandbox):
    me = os.getpid()
    code = (
        "import os, signal\n"
        f"for pid in ({me}, {os.getppid()}, os.getppid()):\n"
        "    try:\n"
        "        os.kill(pid, signal.SIGKILL)\n"
        "        print('sent', pid, flush=True)\n"
        "    except OSError as e:\n"
        "        print('refused', pid, type(e).__name__, flush=True)\n"
    )
    res = sandbox.run(code)
    # We are still alive to check. Inside a pid namespace, getppid() is 0 (or the namespace's init,
    # which is the sandbox itself); our real pids are not addressable from inside.
    assert os.getpid() == me
    assert f"sent {me}" not in res.stdout
    assert f"refused {me}" in res.stdout
    # kill(getppid()) inside a pid namespace is kill(0): the program's own group, so it may kill itself.
    assert res.status in (base.OK, base.KILLED)
    if res.status == base.KILLED:
        assert res.notes == ["killed by SIGKILL"]


def test_concurrency_limit_serializes_runs():
    sb = LocalSandbox(timeout=5, max_concurrent=1)
    active, peak = [0], [0]
    lock = threading.Lock()
    orig = sb._run

    def counting(*a, **k):
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        try:
            return orig(*a, **k)
        finally:
            with lock:
                active[0] -= 1

    sb._run = counting
    threads = [threading.Thread(target=sb.run, args=("print(1)",)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert peak[0] == 1
