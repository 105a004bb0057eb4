"""Union resident memory (``memory.py``) on hand-written smaps text.

uv run pytest benchmarks/grpo_step/test_memory.py -q
"""

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import memory  # noqa: E402

LIB = "/venv/lib/libtorch_cpu.so"


def _mapping(addr: str, path: str, rss: int, shared: int = 0, anon: int = 0, dirty_shared: int = 0) -> str:
    """One smaps entry; private pages are the rest of ``rss``."""
    private = rss - shared - dirty_shared
    return (
        f"{addr} r-xp 00000000 fe:00 123      {path}\n"
        f"Size:  {4 * rss} kB\nKernelPageSize: 4 kB\nRss: {rss} kB\nPss: 1 kB\n"
        f"Shared_Clean: {shared} kB\nShared_Dirty: {dirty_shared} kB\n"
        f"Private_Clean: 0 kB\nPrivate_Dirty: {private} kB\nReferenced: {rss} kB\n"
        f"Anonymous: {anon} kB\nSwap: 0 kB\nVmFlags: rd ex mr mw me\n"
    )


# driver: libtorch 1000 KiB shared (+ 40 private COW copies, anonymous) + a private file page, heap
DRIVER = (
    _mapping("7f0000000000-7f0000100000", LIB, rss=1000, shared=1000)
    + _mapping("7f0000100000-7f0000110000", LIB, rss=50, shared=0, anon=40)
    + _mapping("7f0000200000-7f0000210000", "/data/model.safetensors", rss=30, shared=0)
    + _mapping("55d000000000-55d000100000", "[heap]", rss=500)
    + _mapping("7f0000300000-7f0000400000", "", rss=200)
)
# worker: the same library (fewer pages resident in it), another heap, a shared-memory object
WORKER = (
    _mapping("7e0000000000-7e0000100000", LIB, rss=800, shared=700, dirty_shared=100)
    + _mapping("7e0000100000-7e0000110000", LIB, rss=60, shared=0, anon=60)
    + _mapping("7e0000200000-7e0000210000", "/dev/shm/plasma", rss=300, shared=300)
    + _mapping("55e000000000-55e000100000", "[heap]", rss=900)
)


def test_parse_splits_anonymous_and_file_pages():
    anon, files = memory.parse_smaps(DRIVER)
    # heap 500 + pathless 200 + COW copies 40 inside the library's mapping
    assert anon == 740
    assert files == {LIB: (10, 1000), "/data/model.safetensors": (30, 0)}
    anon_w, files_w = memory.parse_smaps(WORKER)
    assert anon_w == 900 + 60
    assert files_w == {LIB: (0, 800), "/dev/shm/plasma": (0, 300)}


def test_one_process_union_is_its_rss():
    for text in (DRIVER, WORKER):
        rss = sum(int(line.split()[1]) for line in text.splitlines() if line.startswith("Rss:"))
        assert memory.union_kib([memory.parse_smaps(text)]) == rss


def test_union_counts_shared_library_pages_once():
    d, w = memory.parse_smaps(DRIVER), memory.parse_smaps(WORKER)
    # by hand: anonymous 740 + 960; libtorch private 10 + 0, shared max(1000, 800); model 30; plasma 300
    expected = 740 + 960 + 10 + 1000 + 30 + 300
    assert memory.union_kib([d, w]) == expected
    summed_rss = 1780 + 2060
    assert summed_rss - memory.union_kib([d, w]) == 800  # the worker's shared libtorch pages


def test_live_process_union_matches_smaps_rollup():
    """On this very process: the union of one process equals the kernel's own Rss total (+-2%)."""
    pid = os.getpid()
    for _ in range(3):  # the interpreter's heap moves a little between the two reads
        union = memory.union_kib([memory.read_smaps(pid)])
        rollup = Path(f"/proc/{pid}/smaps_rollup").read_text()
        rss = next(int(line.split()[1]) for line in rollup.splitlines() if line.startswith("Rss:"))
        if abs(union - rss) <= 0.02 * rss:
            return
        time.sleep(0.05)
    raise AssertionError(f"union {union} KiB vs smaps_rollup Rss {rss} KiB")


def test_sampler_on_one_process_tracks_its_rss():
    sampler = memory.UnionSampler(period_s=0.01)
    sampler.add("self", [os.getpid()])
    sampler.start()
    sampler.measure()
    blob = bytearray(64 * 2**20)  # 64 MiB of anonymous pages, touched
    for i in range(0, len(blob), 4096):
        blob[i] = 1
    time.sleep(0.3)
    res = sampler.result()["self"]
    rss_now = memory.status_kib(os.getpid())["VmRSS"] / 1024.0
    sampler.stop()
    del blob
    assert res["samples"] > 0 and res["smaps_reads"] >= 1
    assert abs(res["union_peak_mib"] - rss_now) < 0.05 * rss_now, (res, rss_now)
