"""Detect, once per process, the strongest isolation the local sandbox can use here.

Levels, strongest first (each also has the rlimits and, when we are root, runs as ``nobody``):

- ``bwrap``: bubblewrap with new user/pid/net/ipc/uts namespaces and a minimal read-only root
  (``/usr`` and friends, the interpreter) plus the writable work dir and a private ``/tmp``; the
  program cannot see or touch any other file, has no network and cannot see other processes.
- ``namespaces``: the same confinement built without bubblewrap, from util-linux alone: ``unshare``
  of user/pid/net/mount/ipc/uts namespaces, then (`_NS_ROOT_SCRIPT`) a tmpfs root holding read-only
  binds of ``/usr`` and friends and the interpreter's directories, the work dir at ``/sandbox``, a
  private ``/tmp``, a fresh ``/proc`` and four device nodes; ``pivot_root`` into it and detach the
  old root, so the host filesystem is not reachable at all; then ``setpriv`` empties the capability
  bounding set and sets no_new_privs, so the program cannot mount, remount or chroot its way out.
- ``rlimits``: resource limits, a process group and a reaper (a child subreaper that kills what the
  program left running when it ends) only. The network is open and the filesystem is visible with
  the sandbox user's permissions; a program that kills its reaper can leave a background child
  behind. Never chosen by ``auto``: a program under test could read a dataset's answers, so it must
  be asked for by name (``reward.sandbox.isolation=rlimits``), and it is logged as a loud warning.

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
AUTO_LEVELS = ("bwrap", "namespaces")  # the levels that confine the filesystem
NOBODY = 65534
SANDBOX_DIR = "/sandbox"  # where the work dir appears inside bwrap and the namespaces root


@dataclass(frozen=True)
class Isolation:
    level: str
    python: str  # interpreter path as seen inside the sandbox
    uid: int | None  # uid to switch to (None: keep ours)
    bind_dirs: tuple[str, ...] = field(default=())  # extra read-only dirs of the confined root

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


# Run by /bin/sh as root of the new user namespace (the sandbox user outside): build the minimal root
# on "$1" (an empty dir of ours), bind the work dir "$2" at /sandbox and the read-only dirs "$3"
# (colon-separated), pivot into it, detach the host's root, drop every capability, run "$@".
_NS_ROOT_SCRIPT = r"""
set -eu
N="$1"; W="$2"; RO="$3"; shift 3
P="$PATH"; PATH=/usr/sbin:/usr/bin:/sbin:/bin  # mount tools; the program gets its own PATH back
mount -t tmpfs -o size=1m,mode=755,nosuid,nodev verl-sandbox "$N"
ro_bind() { mkdir -p "$N$1"; mount --rbind "$1" "$N$1"; mount -o remount,bind,ro,nosuid,nodev "$N$1"; }
for d in /usr /bin /sbin /lib /lib32 /lib64 /libx32; do
  if [ -L "$d" ]; then ln -s "$(readlink "$d")" "$N$d"; elif [ -d "$d" ]; then ro_bind "$d"; fi
done
IFS=:; for d in $RO; do [ -n "$d" ] && ro_bind "$d"; done; unset IFS
mkdir -p "$N/sandbox" "$N/tmp" "$N/proc" "$N/dev" "$N/.oldroot"
mount --bind "$W" "$N/sandbox"
mount -t tmpfs -o size=64m,mode=1777,nosuid,nodev verl-tmp "$N/tmp"
mount -t proc -o nosuid,nodev,noexec proc "$N/proc"
for x in null zero random urandom; do touch "$N/dev/$x"; mount --bind "/dev/$x" "$N/dev/$x"; done
ln -s /proc/self/fd "$N/dev/fd"
mount -o remount,bind,ro "$N"
cd "$N"; pivot_root . .oldroot; umount -l /.oldroot; cd /sandbox
PATH="$P"
exec setpriv --bounding-set=-all --inh-caps=-all --no-new-privs -- "$@"
"""


# The rlimits level has no pid namespace to take a program's background children down with it: this
# wrapper (argv[1:] is the command) adopts them as a child subreaper, and once the command has ended
# kills and reaps whatever is left, then ends as the command did (its exit status, or its signal).
_REAPER = r"""
import ctypes, os, signal, subprocess, sys
ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
rc = subprocess.Popen(sys.argv[1:]).wait()
me = str(os.getpid()).encode()
while True:
    left = []
    for e in os.listdir("/proc"):
        try:
            if e.isdigit() and open("/proc/%s/stat" % e, "rb").read().rsplit(b")", 1)[1].split()[1] == me:
                left.append(int(e))
        except (OSError, IndexError):
            pass
    if not left:
        break
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (OSError, ChildProcessError):
            pass
if rc < 0:
    signal.signal(-rc, signal.SIG_DFL)
    os.kill(os.getpid(), -rc)
sys.exit(rc)
"""


def wrapper_argv(iso: Isolation, workdir: str, rootdir: str | None = None) -> list[str]:
    """The command prefix that puts a program into isolation level `iso` (before the rlimits).

    ``rootdir``: an empty directory the ``namespaces`` level mounts the program's root on.
    """
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
        if rootdir is None:
            raise ValueError("the namespaces level needs rootdir (an empty directory for the program's root)")
        return [
            "unshare", "--user", "--map-root-user", "--net", "--pid", "--fork", "--kill-child",
            "--mount", "--propagation", "private", "--ipc", "--uts", "--",
            "/bin/sh", "-c", _NS_ROOT_SCRIPT, "verl-sandbox", rootdir, workdir, ":".join(iso.bind_dirs),
        ]  # fmt: skip
    return [iso.python, "-I", "-S", "-c", _REAPER]


def _works(iso: Isolation, workdir: str, rootdir: str) -> bool:
    argv = wrapper_argv(iso, workdir, rootdir) + ["prlimit", "--nproc=16", "--", iso.python, "-I", "-c", "print(6*7)"]
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
    """The strongest working isolation (or exactly `level`), logged; raises when `level` cannot work.

    ``auto`` tries ``bwrap`` then ``namespaces`` and raises when neither works: ``rlimits`` leaves
    the filesystem open to the program, so it is used only when asked for by name."""
    import tempfile

    if level != "auto" and level not in LEVELS:
        raise ValueError(f"sandbox isolation must be 'auto' or one of {LEVELS}, got {level!r}")
    if shutil.which("prlimit") is None:
        raise RuntimeError("the local sandbox needs the `prlimit` tool (util-linux) on PATH")
    uid = NOBODY if os.getuid() == 0 else None
    system_python = shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin") or "/usr/bin/python3"
    pythons = [python] if python else [sys.executable, system_python]
    levels = AUTO_LEVELS if level == "auto" else (level,)
    tried = []
    with tempfile.TemporaryDirectory(prefix="verl-sbx-probe-") as private:
        wd, root = os.path.join(private, "work"), os.path.join(private, "root")
        os.mkdir(wd)
        os.mkdir(root)
        if uid is not None:
            os.chmod(private, 0o711)
            os.chown(wd, uid, uid)
        for lvl in levels:
            if lvl == "bwrap" and shutil.which("bwrap") is None:
                tried.append("bwrap: not installed")
                continue
            if lvl == "namespaces" and shutil.which("unshare") is None:
                tried.append("namespaces: no unshare tool")
                continue
            for py in dict.fromkeys(pythons):
                iso = Isolation(lvl, py, uid, _interpreter_dirs(py) if lvl != "rlimits" else ())
                if _works(iso, wd, root):
                    _announce(iso, tried)
                    return iso
                tried.append(f"{lvl} with {py}: failed")
    hint = (
        " Install bubblewrap (apt-get install bubblewrap) or allow unprivileged user namespaces; or, knowing "
        "that programs under test then see the network and every file their user can read, ask for "
        "reward.sandbox.isolation=rlimits by name."
        if level == "auto"
        else ""
    )
    raise RuntimeError(
        f"no sandbox isolation level works here (asked for {level!r}); tried: {'; '.join(tried)}.{hint}"
    )


def _announce(iso: Isolation, tried: list[str]) -> None:
    why = f" (stronger levels unavailable: {'; '.join(tried)})" if tried else ""
    if iso.level == "bwrap":
        logger.info("local code sandbox isolation: %s", iso.describe())
    elif iso.level == "namespaces":
        logger.info(
            "local code sandbox isolation: %s%s: namespaces and a minimal read-only root built with util-linux",
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
