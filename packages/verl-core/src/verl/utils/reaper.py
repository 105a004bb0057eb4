"""A watchdog that ends what a killed driver started (``start_reaper``).

A driver that starts its own Ray cluster (``ray.init()`` without an address) owns Ray's processes: GCS,
raylet, their agents and the worker processes. When it is SIGKILLed (OOM killer, preemption, ``kill -9``)
nothing runs its cleanup; the chaos suite measured Ray's workers exiting but ``ray::DashboardAgent`` and
``ray::RuntimeEnvAgent`` living on for minutes, reparented to init. The reaper is a small process in a
session of its own that watches the driver, remembers the driver's descendants (pid and start time, so a
reused pid is never hit) and SIGKILLs those still running once the driver is gone. Linux only (/proc).

    python -m verl.utils.reaper DRIVER_PID      # what start_reaper() runs
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

_POLL_S = 0.5


def _stat(pid: int) -> tuple[int, int] | None:
    """(parent pid, start time in clock ticks) of ``pid`` from /proc, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            text = f.read().decode(errors="replace")
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()  # the command name may hold spaces and parentheses
    return int(fields[1]), int(fields[19])


def descendants(root: int) -> dict[int, int]:
    """``{pid: start time}`` of every process below ``root``."""
    children: dict[int, list[int]] = {}
    starts: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = _stat(int(name))
            if st is not None:
                children.setdefault(st[0], []).append(int(name))
                starts[int(name)] = st[1]
    out, todo = {}, [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in out:
                out[child] = starts[child]
                todo.append(child)
    return out


def watch(driver: int, poll_s: float = _POLL_S) -> list[int]:
    """Until ``driver`` exits, remember its descendants; then SIGKILL the ones still running (same start
    time). Returns the pids killed."""
    me = os.getpid()
    seen: dict[int, int] = {}
    driver_start = (_stat(driver) or (0, None))[1]
    while True:
        st = _stat(driver)
        if st is None or st[1] != driver_start or _is_zombie(driver):
            break
        seen.update({p: s for p, s in descendants(driver).items() if p != me})
        time.sleep(poll_s)
    killed = []
    for pid, start in seen.items():
        st = _stat(pid)
        if st is not None and st[1] == start:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except ProcessLookupError:
                pass
    return killed


def _is_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            text = f.read().decode(errors="replace")
    except OSError:
        return True
    return text[text.rindex(")") + 2 :].split()[0] == "Z"


def start_reaper() -> subprocess.Popen | None:
    """Start the watchdog for this process (Linux; elsewhere None). Call after ``ray.init()`` started a
    local cluster; a normal exit is fine too (what Ray's shutdown left is ended)."""
    if not os.path.isdir("/proc/self"):
        return None
    return subprocess.Popen(
        [sys.executable, "-m", "verl.utils.reaper", str(os.getpid())],
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )


if __name__ == "__main__":
    watch(int(sys.argv[1]))
