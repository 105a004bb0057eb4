"""The local sandbox: run a program on this machine, contained.

Each run gets a fresh temporary work dir and its own session/process group, an environment built
from constants (nothing of the trainer's: no tokens, keys or paths), and hard rlimits set inside the
sandbox by ``prlimit`` (CPU seconds, address space, processes, file size, open files, no core dumps).
When the trainer runs as root the program runs as ``nobody`` (at ``rlimits``: as a uid of its own,
``uids``), which makes RLIMIT_NPROC bind and keeps it away from root's files and processes.
Namespaces / bubblewrap add what `isolation` describes.
The wall clock is enforced here: at the limit the whole process group is SIGKILLed, and with
namespaces the pid namespace dies with its first process, so nothing the program started survives
(setsid'ed or double-forked children included). A semaphore bounds concurrent runs.
"""

from __future__ import annotations

import logging
import math
import os
import select
import shutil
import signal
import subprocess
import tempfile
import threading
import time

from verl.rewards.sandbox import base
from verl.rewards.sandbox.base import RunResult, Sandbox
from verl.rewards.sandbox.isolation import SANDBOX_DIR, Isolation, probe, user_kwargs, wrapper_argv
from verl.rewards.sandbox.uids import leased_uid

logger = logging.getLogger(__name__)

_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "PYTHONIOENCODING": "utf-8",
    "PYTHONHASHSEED": "0",
    "PYTHONDONTWRITEBYTECODE": "1",
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}

_probe_lock = threading.Lock()
_probed: dict[tuple[str, str | None], Isolation] = {}


def detect_isolation(level: str = "auto", python: str | None = None) -> Isolation:
    """The isolation the local sandbox uses (probed once per process and logged)."""
    with _probe_lock:
        key = (level, python)
        if key not in _probed:
            _probed[key] = probe(level, python)
        return _probed[key]


class LocalSandbox(Sandbox):
    """Run Python programs locally under the strongest available isolation.

    Args:
        timeout: default wall-clock limit per run, seconds.
        memory_mb: address-space limit (RLIMIT_AS), MiB.
        max_processes: RLIMIT_NPROC for the sandbox (threads count too).
        max_file_mb: RLIMIT_FSIZE: the largest file (and stdout/stderr) a program may write, MiB.
        max_output_bytes: how much of stdout/stderr is returned.
        max_concurrent: runs allowed at once in this process (default: CPU count).
        isolation: 'auto' (bwrap, else namespaces; both confine the filesystem), 'bwrap',
            'namespaces' or 'rlimits' (no filesystem or network confinement: only by name).
        python: interpreter for programs (default: ours, else the system python3).
    """

    def __init__(
        self,
        timeout: float = 10.0,
        memory_mb: int = 1024,
        max_processes: int = 32,
        max_file_mb: int = 16,
        max_output_bytes: int = 1 << 20,
        max_concurrent: int | None = None,
        isolation: str = "auto",
        python: str | None = None,
    ):
        self.timeout = float(timeout)
        self.memory_mb = int(memory_mb)
        self.max_processes = int(max_processes)
        self.max_file_mb = int(max_file_mb)
        self.max_output_bytes = int(max_output_bytes)
        self.isolation = detect_isolation(isolation, python)
        self._slots = threading.BoundedSemaphore(max_concurrent or os.cpu_count() or 1)

    def run(
        self,
        code: str,
        stdin: str = "",
        *,
        language: str = "python",
        timeout: float | None = None,
        memory_mb: int | None = None,
    ) -> RunResult:
        if language != "python":
            raise ValueError(f"the local sandbox runs language 'python' only, got {language!r}")
        timeout, memory_mb = timeout or self.timeout, memory_mb or self.memory_mb
        with self._slots:
            if self.isolation.level == "rlimits" and self.isolation.uid is not None:
                with leased_uid() as uid:  # uids.py: why each program gets a uid of its own here
                    return self._run(code, stdin, timeout, memory_mb, uid)
            return self._run(code, stdin, timeout, memory_mb, self.isolation.uid)

    def _limits(self, timeout: float, memory_mb: int) -> list[str]:
        nproc = self.max_processes
        if self.isolation.level == "rlimits" and self.isolation.uid is None:
            # Without a user namespace RLIMIT_NPROC counts every process of our user.
            nproc += _count_own_processes()
        cpu = math.ceil(timeout) + 1
        fsize = self.max_file_mb << 20
        return [
            "prlimit",
            f"--cpu={cpu}:{cpu + 1}",
            f"--as={memory_mb << 20}",
            f"--nproc={nproc}",
            f"--fsize={fsize}",
            "--nofile=256",
            "--core=0",
            "--",
        ]

    def _run(self, code: str, stdin: str, timeout: float, memory_mb: int, uid: int | None) -> RunResult:
        iso = self.isolation
        start = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="verl-sbx-") as private:
            # `private` holds stdin/stdout/stderr (passed as fds, never visible to the program);
            # `work` is the program's own directory; `root` where the namespaces level mounts its root.
            work, root = os.path.join(private, "work"), os.path.join(private, "root")
            os.mkdir(work)
            os.mkdir(root)
            with open(os.path.join(work, "main.py"), "w", encoding="utf-8") as f:
                f.write(code)
            if uid is not None:
                os.chown(work, uid, uid)
                os.chown(os.path.join(work, "main.py"), uid, uid)
                os.chmod(private, 0o711)  # the program's user must traverse to `work`, not list `private`
            inside = work if iso.level == "rlimits" else SANDBOX_DIR
            env = dict(_ENV, HOME=inside, TMPDIR="/tmp")
            argv = (
                wrapper_argv(iso, work, root)
                + self._limits(timeout, memory_mb)
                + [iso.python, "-I", "-B", "main.py"]
            )
            with _private_file(private, "stdin", "w") as f:
                f.write(stdin.encode("utf-8"))
            with (
                open(os.path.join(private, "stdin"), "rb") as fin,
                _private_file(private, "stdout", "w") as fout,
                _private_file(private, "stderr", "w") as ferr,
            ):
                try:
                    proc = subprocess.Popen(
                        argv,
                        stdin=fin,
                        stdout=fout,
                        stderr=ferr,
                        cwd=work,
                        env=env,
                        start_new_session=True,
                        close_fds=True,
                        **user_kwargs(uid),
                    )
                except OSError as e:
                    return RunResult(
                        base.SANDBOX_ERROR, notes=[f"could not start the sandbox: {e}"], isolation=iso.level
                    )
                timed_out = _wait_then_kill_group(proc, timeout)
                rc = proc.wait()
            stdout = _read_capped(os.path.join(private, "stdout"), self.max_output_bytes)
            stderr = _read_capped(os.path.join(private, "stderr"), self.max_output_bytes)
            shutil.rmtree(work, ignore_errors=True)
        return _classify(rc, timed_out, stdout, stderr, time.monotonic() - start, iso, timeout)


def _private_file(directory: str, name: str, mode: str):
    """A new file only its creator can read (0600): other sandbox runs, which share the sandbox user
    and, below the bwrap level, see /tmp, must not read this run's stdin or output."""
    fd = os.open(os.path.join(directory, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    return os.fdopen(fd, "wb")


def _wait_then_kill_group(proc: subprocess.Popen, timeout: float) -> bool:
    """Wait up to `timeout` s, then SIGKILL the process group; True when the limit was hit.

    The group is killed in every case (a normal exit may leave background children behind), while the
    leader is still an unreaped zombie so its pid, and so the group id, cannot have been reused. At the
    limit, every process started under the leader is also killed and waited for: bwrap's inner init
    runs in a session of its own, and a pid namespace is torn down only after its init is gone, so
    returning as soon as the leader died would leave the program running for a while.
    """
    timed_out = False
    try:
        pidfd = os.pidfd_open(proc.pid)
    except OSError:
        pidfd = None
    try:
        if pidfd is not None:
            ready, _, _ = select.select([pidfd], [], [], timeout)
            timed_out = not ready
        else:
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                timed_out = True
        tree = _open_tree(proc.pid) if timed_out else []
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        _kill_and_wait(tree)
    finally:
        if pidfd is not None:
            os.close(pidfd)
    return timed_out


def _open_tree(root: int) -> list[int]:
    """pidfds of every live descendant of ``root`` (opened before anything is killed, so none of
    these pids can have been reaped and reused)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as f:
                    ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    fds, todo = [], list(children.get(root, []))
    while todo:
        pid = todo.pop()
        todo += children.get(pid, [])
        try:
            fds.append(os.pidfd_open(pid))
        except OSError:  # already gone
            pass
    return fds


def _kill_and_wait(pidfds: list[int], limit: float = 10.0) -> None:
    try:
        for fd in pidfds:
            try:
                signal.pidfd_send_signal(fd, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.monotonic() + limit
        waiting = list(pidfds)
        while waiting and time.monotonic() < deadline:
            ready, _, _ = select.select(waiting, [], [], max(0.0, deadline - time.monotonic()))
            waiting = [fd for fd in waiting if fd not in ready]
        if waiting:
            logger.warning("%d sandboxed process(es) still alive %g s after SIGKILL", len(waiting), limit)
    finally:
        for fd in pidfds:
            os.close(fd)


def _read_capped(path: str, cap: int) -> str:
    with open(path, "rb") as f:
        data = f.read(cap + 1)
    text = data[:cap].decode("utf-8", errors="replace")
    return text + ("\n[output truncated]" if len(data) > cap else "")


def _count_own_processes() -> int:
    uid = os.getuid()
    n = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}").st_uid == uid:
                    n += 1
            except OSError:
                pass
    return n


def _classify(
    rc: int, timed_out: bool, stdout: str, stderr: str, wall: float, iso: Isolation, timeout: float
) -> RunResult:
    res = RunResult(base.OK, exit_code=rc, stdout=stdout, stderr=stderr, wall_time=wall, isolation=iso.level)
    sig = -rc if rc < 0 else (rc - 128 if rc > 128 and iso.level != "rlimits" else None)
    if sig is not None:
        try:
            res.signal = signal.Signals(sig).name
        except ValueError:
            sig = None
    tail = stderr[-4000:]
    if timed_out:
        res.status = base.TIMEOUT
        res.notes.append(f"wall-clock limit of {timeout:g} s reached; the process tree was killed")
    elif res.signal == "SIGXCPU" or (res.signal == "SIGKILL" and wall >= math.ceil(timeout) + 1):
        # SIGXCPU is the soft CPU limit; a SIGKILL after that much time is the hard one (the program
        # ignored SIGXCPU). An earlier SIGKILL came from elsewhere (the program itself, the OOM killer).
        res.status = base.TIMEOUT
        res.notes.append(f"CPU-time limit reached ({res.signal})")
    elif "MemoryError" in tail or "Cannot allocate memory" in tail or "std::bad_alloc" in tail:
        res.status = base.MEMORY
        res.notes.append("memory limit reached (allocation refused)")
    elif res.signal is not None:
        res.status = base.KILLED
        res.notes.append(f"killed by {res.signal}")
    elif rc != 0:
        res.status = base.ERROR
        if "File too large" in tail or "EFBIG" in tail:
            res.notes.append("file-size limit reached")
        if "BlockingIOError" in tail or "Resource temporarily unavailable" in tail:
            res.notes.append("process limit reached")
    if res.status == base.OK and ("File too large" in tail):
        res.notes.append("file-size limit reached")
    return res
