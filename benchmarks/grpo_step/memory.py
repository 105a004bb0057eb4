"""Union resident memory of a set of processes, and a sampler thread that tracks its peak.

Summing the RSS of a driver and its Ray worker counts twice every page of the torch / CUDA shared
libraries that both map (the same file pages in the page cache). The union estimate counts
anonymous pages (and anything not backed by a file) per process, summed, and file-backed pages per
mapped file: the pages only one process maps (``Private_*``) summed, the pages mapped by several
(``Shared_*``) counted once, as the largest such count of any process in the set. For one process
the union is exactly its RSS.

``/proc/<pid>/smaps`` costs 25-40 ms per torch process (the kernel walks its page tables), too much
to read every 50 ms on two cores, so :class:`UnionSampler` reads it only when a process's file-backed
RSS moved (at most once a second per group) and otherwise adds the cheap ``RssAnon`` counters of
``/proc/<pid>/status`` to the last per-file breakdown. Steady-state steps map no new files, so after
warm-up the sampler reads only ``status``.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

# per-process smaps summary: (anon_kib, {path: (private_file_kib, shared_file_kib)})
Smaps = tuple[int, dict[str, tuple[int, int]]]

_FIELDS = ("Rss", "Anonymous", "Shared_Clean", "Shared_Dirty")


def parse_smaps(text: str) -> Smaps:
    """Split one process's ``smaps`` text into anonymous KiB and per-file (private, shared) KiB.

    A mapping's pages are file pages when it has a path (``/...``), less its ``Anonymous`` pages
    (copy-on-write copies of a private file mapping belong to this process alone). Mappings without
    a path (heap, stacks, ``[vdso]``, anonymous mmaps) count as anonymous. A file page is shared when
    more than one process maps it (``Shared_Clean`` + ``Shared_Dirty``), private otherwise.
    """
    anon = 0
    files: dict[str, list[int]] = {}

    def close(path: str | None, vals: dict[str, int]) -> None:
        nonlocal anon
        if path is None:
            return
        rss = vals.get("Rss", 0)
        if not path.startswith("/"):
            anon += rss
            return
        a = vals.get("Anonymous", 0)
        shared = min(vals.get("Shared_Clean", 0) + vals.get("Shared_Dirty", 0), rss - a)
        anon += a
        entry = files.setdefault(path, [0, 0])
        entry[0] += rss - a - shared
        entry[1] += shared

    path: str | None = None
    vals: dict[str, int] = {}
    for line in text.splitlines():
        if not line:
            continue
        head = line.split(None, 1)[0]
        if head.endswith(":"):
            key = head[:-1]
            if key in _FIELDS:
                vals[key] = int(line.split()[1])
            continue
        if "-" in head:  # a mapping header: "start-end perms offset dev inode [path]"
            close(path, vals)
            parts = line.split(None, 5)
            path = parts[5].strip() if len(parts) == 6 else ""
            vals = {}
    close(path, vals)
    return anon, {p: (v[0], v[1]) for p, v in files.items()}


def union_kib(procs: list[Smaps]) -> int:
    """Union resident KiB of processes: anonymous summed; per file, private summed + max shared."""
    total = sum(anon for anon, _ in procs)
    paths = {p for _, files in procs for p in files}
    for p in paths:
        entries = [files[p] for _, files in procs if p in files]
        total += sum(priv for priv, _ in entries) + max(shared for _, shared in entries)
    return total


def status_kib(pid: int) -> dict[str, int]:
    """``VmRSS``, ``VmHWM``, ``RssAnon``, ``RssFile``, ``RssShmem`` of a live process, KiB."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key = line.split(":", 1)[0]
        if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile", "RssShmem"):
            out[key] = int(line.split()[1])
    return out


def read_smaps(pid: int) -> Smaps:
    return parse_smaps(Path(f"/proc/{pid}/smaps").read_text())


@dataclass
class _Group:
    pids: list[int]
    smaps: dict[int, Smaps] = field(default_factory=dict)
    file_kib: dict[int, int] = field(default_factory=dict)  # RssFile + RssShmem at the smaps read
    anon_kib: dict[int, int] = field(default_factory=dict)  # RssAnon at the smaps read
    union_at_read: int = 0
    smaps_t: float = 0.0
    smaps_reads: int = 0
    peak_kib: int = 0
    peak_sum_rss_kib: int = 0  # same instant's summed VmRSS, for comparison
    samples: int = 0


class UnionSampler:
    """A daemon thread that samples the union resident memory of named process groups.

    ``add(name, pids)`` registers a group; ``measure()`` starts tracking peaks (call it when the
    measured rounds begin, so set-up peaks are left out); ``stop()`` ends the thread;
    ``result()`` gives each group's peak union MiB and bookkeeping.
    """

    def __init__(self, period_s: float = 0.05, smaps_min_interval_s: float = 1.0, slack_kib: int = 1024):
        self.period_s, self.min_interval, self.slack = period_s, smaps_min_interval_s, slack_kib
        self.groups: dict[str, _Group] = {}
        self.measuring = False
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="union-rss-sampler", daemon=True)
        self.errors: list[str] = []

    def add(self, name: str, pids: list[int]) -> None:
        with self._lock:
            self.groups[name] = _Group(list(pids))

    def start(self) -> None:
        self._thread.start()

    def measure(self) -> None:
        with self._lock:
            for g in self.groups.values():
                g.peak_kib = g.peak_sum_rss_kib = g.samples = 0
            self.measuring = True

    def stop(self) -> None:
        self._stop.set()
        if self._thread.ident is not None:  # started
            self._thread.join(timeout=10)

    def sample_group(self, g: _Group) -> tuple[int, int]:
        """(union KiB, summed VmRSS KiB) of a group now; re-reads smaps when file pages moved.

        Between smaps reads: the union at the last read plus how much each process's ``RssAnon``
        (private by construction) changed since.
        """
        status = {pid: status_kib(pid) for pid in g.pids}
        file_now = {pid: s["RssFile"] + s["RssShmem"] for pid, s in status.items()}
        now = time.monotonic()
        moved = not g.smaps or any(abs(file_now[p] - g.file_kib[p]) > self.slack for p in g.pids)
        if moved and (not g.smaps or now - g.smaps_t >= self.min_interval):
            before = status
            g.smaps = {pid: read_smaps(pid) for pid in g.pids}
            status = {pid: status_kib(pid) for pid in g.pids}
            # the anonymous baseline: the mean of the counters just before and after the read
            g.anon_kib = {p: (before[p]["RssAnon"] + status[p]["RssAnon"]) // 2 for p in g.pids}
            g.file_kib = {p: status[p]["RssFile"] + status[p]["RssShmem"] for p in g.pids}
            g.union_at_read = union_kib(list(g.smaps.values()))
            g.smaps_t, g.smaps_reads = now, g.smaps_reads + 1
        union = g.union_at_read + sum(status[p]["RssAnon"] - g.anon_kib[p] for p in g.pids)
        return union, sum(s["VmRSS"] for s in status.values())

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            with self._lock:
                for name, g in self.groups.items():
                    try:
                        union, summed = self.sample_group(g)
                    except (FileNotFoundError, ProcessLookupError) as e:  # a process left
                        if len(self.errors) < 100:
                            self.errors.append(f"{name}: {e}")
                        continue
                    if self.measuring and union > g.peak_kib:
                        g.peak_kib, g.peak_sum_rss_kib = union, summed
                    g.samples += self.measuring

    def result(self) -> dict[str, dict]:
        with self._lock:
            return {
                name: {
                    "pids": g.pids,
                    "union_peak_mib": g.peak_kib / 1024.0,
                    "sum_rss_at_union_peak_mib": g.peak_sum_rss_kib / 1024.0,
                    "samples": g.samples,
                    "smaps_reads": g.smaps_reads,
                }
                for name, g in self.groups.items()
            }
