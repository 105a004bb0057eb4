"""A uid of its own for each program running at the ``rlimits`` level (when the trainer is root).

RLIMIT_NPROC counts the processes of a user, not of one program: with every program running as
``nobody``, 33 programs at once under the default limit of 32 leave none of them able to start a child,
and a program can signal or read the ``/proc`` entries of the others running beside it. The confining
levels keep programs apart with a pid namespace each; at ``rlimits`` only the uid can. So each run leases
a uid from a fixed range no account uses: ``flock`` on one file per uid in a root-only directory makes a
lease exclusive across threads and processes (several reward workers on one machine), and the kernel
releases it when its holder dies.
"""

from __future__ import annotations

import fcntl
import os
import pwd
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

#: the first uid leased; far above the ranges that distributions (< 60000), systemd's dynamic users
#: (61184-65519) and the usual subordinate-uid ranges of rootless containers hand out
UID_BASE = 0x7FFE0000
UID_COUNT = 4096


def lease_dir() -> str:
    """The directory of the lock files (root's, 0700; refused when anyone else could have made it)."""
    path = os.path.join(tempfile.gettempdir(), "verl-sandbox-uids")
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise RuntimeError(
            f"{path} must be a directory owned by uid {os.getuid()} with mode 0700 (the sandbox's uid leases); "
            f"it is mode {oct(st.st_mode)} owned by uid {st.st_uid}: remove it"
        )
    return path


@contextmanager
def leased_uid() -> Iterator[int]:
    """Hold one free uid of ``UID_BASE .. UID_BASE + UID_COUNT - 1`` for the duration of the block."""
    directory = lease_dir()
    for uid in range(UID_BASE, UID_BASE + UID_COUNT):
        fd = os.open(os.path.join(directory, str(uid)), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        try:
            _check_unused(uid)
            yield uid
        finally:
            os.close(fd)  # releases the lock
        return
    raise RuntimeError(
        f"all {UID_COUNT} sandbox uids ({UID_BASE}..{UID_BASE + UID_COUNT - 1}) are leased: more programs run "
        "at once on this machine than the rlimits level can keep apart; lower the sandbox's max_concurrent"
    )


def _check_unused(uid: int) -> None:
    try:
        name = pwd.getpwuid(uid).pw_name
    except KeyError:
        return
    raise RuntimeError(
        f"uid {uid} belongs to account {name!r}; the rlimits sandbox leases uids {UID_BASE}.."
        f"{UID_BASE + UID_COUNT - 1} for its programs and must not run them as an existing account"
    )
