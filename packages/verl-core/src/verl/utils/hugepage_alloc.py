"""Large fresh CPU tensors backed by transparent huge pages, where the OS allows it.

DataProto ops that build big new tensors (repeat, concat, index select) spend most of their time
in first-touch page faults, one per 4 KiB page, once the output is too large for malloc to recycle. Advising the fresh buffer with
`madvise(MADV_HUGEPAGE)` before it is written lets Linux back it with 2 MiB pages when THP is in
"madvise" or "always" mode: 512x fewer faults (benchmarks/bench_dataproto.py measures the effect).
Elsewhere (THP off, not Linux, no libc) the advice is skipped or ignored and the
tensor is an ordinary `torch.empty`.
"""

from __future__ import annotations

import ctypes
import sys

import torch

__all__ = ["MIN_BYTES", "empty_cpu", "wants_fresh_buffer"]

_HUGE_PAGE = 2 * 2**20
# Only outputs above glibc's largest mmap threshold (32 MiB): those are always fresh mmaps that fault
# page by page. Smaller ones are recycled from malloc's heap after the first round, and advising
# recycled memory measured slower (khugepaged/compaction work), not faster.
MIN_BYTES = 32 * 2**20
_MADV_HUGEPAGE = 14

_madvise = None
_madvise_loaded = False


def _get_madvise():
    global _madvise, _madvise_loaded
    if not _madvise_loaded:
        _madvise_loaded = True
        if sys.platform.startswith("linux"):
            try:
                fn = ctypes.CDLL(None, use_errno=True).madvise
            except (OSError, AttributeError):  # no libc symbol: run without the advice
                fn = None
            if fn is not None:
                fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
                fn.restype = ctypes.c_int
            _madvise = fn
    return _madvise


def wants_fresh_buffer(like: torch.Tensor, nbytes: int) -> bool:
    """Whether an output of nbytes computed from `like` should go through `empty_cpu` (out= ops
    do not support autograd, so tensors that require grad keep the plain path)."""
    return nbytes >= MIN_BYTES and like.device.type == "cpu" and not like.requires_grad


def empty_cpu(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """`torch.empty(shape, dtype)` on CPU, advised to use huge pages when it is large."""
    out = torch.empty(shape, dtype=dtype)
    nbytes = out.numel() * out.element_size()
    madvise = _get_madvise() if nbytes >= MIN_BYTES else None
    if madvise is not None:
        start = out.data_ptr()
        first = (start + _HUGE_PAGE - 1) // _HUGE_PAGE * _HUGE_PAGE
        last = (start + nbytes) // _HUGE_PAGE * _HUGE_PAGE
        if last > first:
            madvise(first, last - first, _MADV_HUGEPAGE)  # advice only: a failure changes nothing
    return out
