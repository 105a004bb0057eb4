"""Detect, once per process, the strongest isolation the local sandbox can use here.

Levels, strongest first (each also has the rlimits and, when we are root, runs as ``nobody``):

- ``bwrap``: bubblewrap with new user/pid/net/ipc/uts namespaces and a minimal read-only root
  (``/usr`` and friends, the interpreter) plus the writable work dir and a private ``/tmp``; the
  program cannot see or touch any other file, has no network and cannot see other processes.
- ``namespaces``: ``unshare`` of user/pid/net/mount namespaces. No network, no view of other
  processes, but the host filesystem is visible with the sandbox user's permissions (as ``nobody``
  when we are root: world-readable files can be read, world-writable dirs such as /tmp written).
- ``rlimits``: resource limits and a process group only. The network is open and the filesystem is
  as visible as above. Logged as a warning at start-up.

Each level is probed by actually running the interpreter under it, so a kernel that forbids user
namespaces (or a container without bwrap) falls back instead of failing every run.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field

logger = logging.getLogger(__name__)

LEVELS = ("bwrap", "namespaces", "rlimits")
NOBODY = 65534
SANDBOX_DIR = "/sandbox"  # where the work dir appears inside bwrap


@dataclass(frozen=True)
class Isolation:
    level: str
    python: str  # interpreter path as seen inside the sandbox
    uid: int | None  # uid to switch to (None: keep ours)
    bind_dirs: tuple[str, ...] = field(default=())  # extra read-only dirs for bwrap

    def describe(self) -> str:
        who = f"uid {self.uid}" if self.uid is not None else f"uid {os.getuid()} (ours)"
        return f"{self.level} ({who}, python {self.python})"


def _interpreter_dirs(python: str) -> tuple[str, ...]:
    """Directories bwrap must expose so that `python` runs: its install prefix and venv, unless under /usr."""
    dirs = set()
    real = os.path.realpath(python)
    for p in (real, python):
        prefix = os.path.dirname(os.path.dirname(p))
        if prefix and not prefix.startswith("/usr"):
            dirs.add(prefix)
    if os.path.realpath(python) == os.path.realpath(sys.executable):
        for p in (sys.prefix, sys.base_prefix, sys.exec_prefix):
            if not p.startswith("/usr"):
                dirs.add(p)
    return tuple(sorted(dirs))


def wrapper_argv(iso: Isolation, workdir: str) -> list[str]:
    """The command prefix that puts a program into isolation level `iso` (before the rlimits)."""
    if iso.level == "bwrap":
        argv = ["bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
        for top in ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
            if os.path.islink(top):
                argv += ["--symlink", os.readlink(top), top]
            elif os.path.isdir(top):
                argv += ["--ro-bind", top, top]
        for d in iso.bind_dirs:
            argv += ["--ro-bind", d, d]
        argv += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
        argv += ["--bind", workdir, SANDBOX_DIR, "--chdir", SANDBOX_DIR, "--"]
        return argv
    if iso.level == "namespaces":
        return [
            "unshare", "--user", "--map-root-user", "--net", "--pid", "--fork", "--kill-child",
            "--mount", "--mount-proc", "--ipc", "--uts", "--",
        ]  # fmt: skip
    return []


def _works(iso: Isolation, workdir: str) -> bool:
    argv = wrapper_argv(iso, workdir) + ["prlimit", "--nproc=16", "--", iso.python, "-I", "-c", "print(6*7)"]
    try:
        out = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=30,
            env={"PATH": "/usr/bin:/bin"},
            cwd=workdir,
            start_new_session=True,
            **user_kwargs(iso.uid),
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return out.returncode == 0 and out.stdout.strip() == "42"


def user_kwargs(uid: int | None) -> dict:
    if uid is None:
        return {}
    return {"user": uid, "group": uid, "extra_groups": []}


def probe(level: str = "auto", python: str | None = None) -> Isolation:
    """The strongest working isolation (or exactly `level`), logged; raises when `level` cannot work."""
    import tempfile

    if level != "auto" and level not in LEVELS:
        raise ValueError(f"sandbox isolation must be 'auto' or one of {LEVELS}, got {level!r}")
    if shutil.which("prlimit") is None:
        raise RuntimeError("the local sandbox needs the `prlimit` tool (util-linux) on PATH")
    uid = NOBODY if os.getuid() == 0 else None
    system_python = shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin") or "/usr/bin/python3"
    pythons = [python] if python else [sys.executable, system_python]
    levels = LEVELS if level == "auto" else (level,)
    tried = []
    with tempfile.TemporaryDirectory(prefix="verl-sbx-probe-") as wd:
        if uid is not None:
            os.chown(wd, uid, uid)
        for lvl in levels:
            if lvl == "bwrap" and shutil.which("bwrap") is None:
                tried.append("bwrap: not installed")
                continue
            if lvl == "namespaces" and shutil.which("unshare") is None:
                tried.append("namespaces: no unshare tool")
                continue
            for py in dict.fromkeys(pythons):
                iso = Isolation(lvl, py, uid, _interpreter_dirs(py) if lvl == "bwrap" else ())
                if _works(iso, wd):
                    _announce(iso, tried)
                    return iso
                tried.append(f"{lvl} with {py}: failed")
    raise RuntimeError(
        f"no sandbox isolation level works here (asked for {level!r}); tried: {'; '.join(tried)}"
    )


def _announce(iso: Isolation, tried: list[str]) -> None:
    why = f" (stronger levels unavailable: {'; '.join(tried)})" if tried else ""
    if iso.level == "bwrap":
        logger.info("local code sandbox isolation: %s", iso.describe())
    elif iso.level == "namespaces":
        logger.warning(
            "local code sandbox isolation: %s%s. No network and no view of other processes, but the program "
            "can READ every file its user can read. Install bubblewrap (apt-get install bubblewrap) "
            "for filesystem confinement.",
            iso.describe(),
            why,
        )
    else:
        logger.warning(
            "!!! local code sandbox isolation is WEAK: %s%s. Programs HAVE NETWORK ACCESS and see the "
            "filesystem with their user's permissions; only resource limits apply. Allow user namespaces "
            "or install bubblewrap (apt-get install bubblewrap). !!!",
            iso.describe(),
            why,
        )
