"""The code sandbox under load: programs per second at each isolation level and concurrency, what it
holds while running, and what it leaves behind.

A batch is a mix of programs (per 8: 4 fast, 1 slow, 1 crashing, 1 looping until its time limit, 1
leaving a double-forked background child behind), run ``--per-slot`` x concurrency at a time through
the local sandbox (``LocalSandbox(max_concurrent=c)`` and ``c`` client threads), and then the same
batch through the SandboxFusion-compatible server (`verl.rewards.sandbox.fusion_server`, in this
process) with its client. For each batch it reports

- programs/s (batch size / wall time) and how many programs ended other than their kind must
  (``wrong``: e.g. a fast program that timed out under load, or a sandbox error);
- peak memory: this process's RSS and the RSS of every process it started (sampled every 50 ms),
  and peak open file descriptors of this process;
- what is left after the batch returns: processes (live descendants of this process, which is made
  a child subreaper so that escaped background children stay its descendants) and ``verl-sbx-*``
  work directories (in a temporary directory of this run only).

Timings need a quiet machine (nothing else running); on a busy one they measure the other load.

    uv run python packages/verl-rewards/benchmarks/sandbox_load.py \\
        [--levels bwrap namespaces rlimits] [--concurrency 1 8 64 256] [--per-slot 2] [--no-fusion]
        [--json results.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass

# kind -> (program, expected RunResult.status)
PROGRAMS = {
    "fast": ("print(sum(range(1000)))\n", "ok"),
    "slow": ("import time\nx = sum(i * i for i in range(200000))\ntime.sleep(0.3)\nprint(x)\n", "ok"),
    "crash": ("raise ValueError('boom')\n", "error"),
    "loop": ("while True:\n    pass\n", "timeout"),
    # the child outlives its parent unless the sandbox kills what a program leaves behind
    "daemon": (
        "import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
        "        time.sleep(30)\n    os._exit(0)\nos.wait()\nprint('parent done')\n",
        "ok",
    ),
}
MIX = ["fast", "fast", "slow", "fast", "crash", "fast", "loop", "daemon"]


def batch_kinds(n: int) -> list[str]:
    return [MIX[i % len(MIX)] for i in range(n)]


# ------------------------------------------------------------------------------ what is held / left
def become_subreaper() -> None:
    """Adopt the orphans of every process we start (PR_SET_CHILD_SUBREAPER), so a program's
    double-forked child that outlives the sandbox is still seen as ours."""
    import ctypes

    if ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) != 0:  # PR_SET_CHILD_SUBREAPER
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER) failed")


def _stat(pid: str) -> tuple[int, int, str] | None:
    """(ppid, rss pages, state) of a process, None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[1]), int(fields[21]), fields[0]
    except (OSError, IndexError, ValueError):
        return None


def descendants(root: int | None = None) -> dict[int, int]:
    """``{pid: rss bytes}`` of every live (not zombie) descendant of ``root`` (this process)."""
    root = root or os.getpid()
    children: dict[int, list[tuple[int, int, str]]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            st = _stat(entry)
            if st is not None:
                children.setdefault(st[0], []).append((int(entry), st[1], st[2]))
    page = os.sysconf("SC_PAGE_SIZE")
    out, todo = {}, [root]
    while todo:
        for pid, rss, state in children.get(todo.pop(), []):
            if state != "Z":
                out[pid] = rss * page
            todo.append(pid)
    return out


def reap_orphans() -> int:
    """Reap adopted children that have exited (call only while no sandbox run is in flight)."""
    n = 0
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return n
        if pid == 0:
            return n
        n += 1


def sandbox_dirs() -> set[str]:
    tmp = tempfile.gettempdir()
    return {name for name in os.listdir(tmp) if name.startswith("verl-sbx-")}


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def self_rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class Sampler:
    """Peaks of our RSS, our children's RSS and our open fds, sampled in a thread while running."""

    def __init__(self, every: float = 0.05):
        self.every = every
        self.peak_self = self.peak_children = self.peak_fds = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak_self = max(self.peak_self, self_rss())
            self.peak_children = max(self.peak_children, sum(descendants().values()))
            self.peak_fds = max(self.peak_fds, open_fds())
            self._stop.wait(self.every)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


@dataclass
class BatchResult:
    path: str
    isolation: str
    concurrency: int
    programs: int
    wall_s: float
    programs_per_s: float
    wrong: int
    wrong_detail: dict
    peak_rss_self_mb: float
    peak_rss_programs_mb: float
    peak_fds: int
    fds_before: int
    fds_after: int
    left_processes: int
    left_dirs: int
    left_detail: list


def run_batch(sandbox, kinds: list[str], concurrency: int, loop_timeout: float, timeout: float, path: str,
              isolation: str) -> BatchResult:  # fmt: skip
    """Run ``kinds`` through ``sandbox`` with ``concurrency`` threads; measure as the module doc says.
    Call `become_subreaper` first, or escaped background children go unseen."""
    reap_orphans()
    desc_before, dirs_before, fds_before = set(descendants()), sandbox_dirs(), open_fds()

    def one(kind: str) -> str:
        code, _ = PROGRAMS[kind]
        return sandbox.run(code, timeout=loop_timeout if kind == "loop" else timeout).status

    start = time.perf_counter()
    with Sampler() as sampler, ThreadPoolExecutor(concurrency) as ex:
        statuses = list(ex.map(one, kinds))
    wall = time.perf_counter() - start
    wrong: dict[str, int] = {}
    for kind, status in zip(kinds, statuses):
        if status != PROGRAMS[kind][1]:
            key = f"{kind}->{status}"
            wrong[key] = wrong.get(key, 0) + 1
    left = sorted(set(descendants()) - desc_before)
    detail = [_cmdline(pid) for pid in left[:5]]
    reap_orphans()
    return BatchResult(
        path=path, isolation=isolation, concurrency=concurrency, programs=len(kinds), wall_s=round(wall, 3),
        programs_per_s=round(len(kinds) / wall, 2), wrong=sum(wrong.values()), wrong_detail=wrong,
        peak_rss_self_mb=round(sampler.peak_self / 2**20, 1),
        peak_rss_programs_mb=round(sampler.peak_children / 2**20, 1), peak_fds=sampler.peak_fds,
        fds_before=fds_before, fds_after=open_fds(), left_processes=len(left),
        left_dirs=len(sandbox_dirs() - dirs_before), left_detail=detail,
    )  # fmt: skip


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f"{pid}: " + f.read().replace(b"\0", b" ").decode(errors="replace")[:120]
    except OSError:
        return f"{pid}: gone"


def private_tempdir() -> str:
    """Sandbox work dirs go to a directory of this run only (another process's are not counted)."""
    path = tempfile.mkdtemp(prefix="sandbox-load-")
    os.chmod(path, 0o711)  # the sandbox user must traverse it to its work dir
    tempfile.tempdir = path
    return path


# ------------------------------------------------------------------------------------------ main
def available_levels(levels: list[str]) -> list[str]:
    from verl.rewards.sandbox.isolation import probe

    out = []
    for level in levels:
        try:
            out.append(probe(level).level)  # 'auto' -> the level it picks
        except RuntimeError as e:
            print(f"# isolation {level}: unavailable here ({str(e)[:160]})")
    return out


def bench(levels, concurrency, per_slot, loop_timeout, timeout, fusion) -> list[BatchResult]:
    from verl.rewards.sandbox.fusion import SandboxFusionSandbox
    from verl.rewards.sandbox.fusion_server import FusionServer
    from verl.rewards.sandbox.local import LocalSandbox

    results = []
    for level in available_levels(levels):
        for c in concurrency:
            kinds = batch_kinds(max(len(MIX), per_slot * c))
            local = LocalSandbox(max_concurrent=c, isolation=level, timeout=timeout)
            res = run_batch(local, kinds, c, loop_timeout, timeout, "local", level)
            results.append(res)
            print(_row(res), flush=True)
            if fusion:
                with FusionServer(max_concurrent=c, max_pending=len(kinds), isolation=level, timeout=timeout,
                                  max_run_timeout=timeout) as server:  # fmt: skip
                    client = SandboxFusionSandbox(url=server.url, max_concurrent=c, timeout=timeout, retries=0)
                    res = run_batch(client, kinds, c, loop_timeout, timeout, "fusion_server", level)
                results.append(res)
                print(_row(res), flush=True)
    return results


HEADER = ("| path | isolation | concurrent | programs | wall s | programs/s | wrong | peak RSS MiB (ours / programs) "
          "| peak fds (before -> after) | left processes | left dirs |\n|---|---|---|---|---|---|---|---|---|---|---|")  # fmt: skip


def _row(r: BatchResult) -> str:
    return (f"| {r.path} | {r.isolation} | {r.concurrency} | {r.programs} | {r.wall_s:.2f} | {r.programs_per_s:.1f} "
            f"| {r.wrong}{' ' + json.dumps(r.wrong_detail) if r.wrong else ''} | {r.peak_rss_self_mb:.0f} / "
            f"{r.peak_rss_programs_mb:.0f} | {r.peak_fds} ({r.fds_before} -> {r.fds_after}) | {r.left_processes} "
            f"| {r.left_dirs} |")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--levels", nargs="+", default=["bwrap", "namespaces", "rlimits"],
                        help="isolation levels ('auto': the one the sandbox picks here)")
    parser.add_argument("--concurrency", nargs="+", type=int, default=[1, 8, 64, 256])
    parser.add_argument("--per-slot", type=int, default=2, help="programs per batch = per-slot x concurrency (>= 8)")
    parser.add_argument("--loop-timeout", type=float, default=2.0, help="time limit of the looping programs, s")
    parser.add_argument("--timeout", type=float, default=60.0, help="time limit of the other programs, s")
    parser.add_argument("--no-fusion", action="store_true", help="skip the SandboxFusion-compatible server")
    parser.add_argument("--json", default=None, help="also write the results here")
    args = parser.parse_args()
    print(f"# {platform.node()}: {os.cpu_count()} CPUs, load average {os.getloadavg()}, "
          f"python {platform.python_version()}; mix per 8 programs: {MIX}")  # fmt: skip
    become_subreaper()
    tmp = private_tempdir()
    print(HEADER, flush=True)
    results = bench(args.levels, args.concurrency, args.per_slot, args.loop_timeout, args.timeout, not args.no_fusion)
    for r in results:
        if r.left_detail:
            print(f"# left by {r.path}/{r.isolation}/{r.concurrency}: {r.left_detail}")
    os.rmdir(tmp)  # fails loudly if a work dir was left behind
    if args.json:
        with open(args.json, "w") as f:
            json.dump([asdict(r) for r in results], f, indent=1)


if __name__ == "__main__":
    main()
