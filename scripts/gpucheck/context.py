"""What the sections share: their context, the sub-check recorder, timing on the device, sizes."""

from __future__ import annotations

import json
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Context:
    """What a section is told: the device, quick (tiny sizes for the CPU dry run), where to write, and
    the wall-clock second (``time.time()``) by which the whole check must be done."""

    device: str
    quick: bool
    work: Path
    deadline: float
    options: dict[str, Any] = field(default_factory=dict)

    def seconds_left(self) -> float:
        return self.deadline - time.time()


class Recorder:
    """Runs sub-checks, keeps each one's result or failure, rewrites the JSON file after each."""

    def __init__(self, path: Path, **header: Any):
        self.path = path
        self.data: dict[str, Any] = {**header, "checks": {}}
        self.flush()

    def flush(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=2, default=str))
        tmp.replace(self.path)

    def set(self, key: str, value: Any) -> None:
        self.data[key] = value
        self.flush()

    def check(self, name: str, fn: Callable[[], dict[str, Any]]) -> dict[str, Any] | None:
        """Run ``fn``; record ``{"status": "ok", "seconds", **result}`` (``"failed"`` when the result lists
        ``failures``) or the exception and its traceback."""
        print(f"--- {name}", flush=True)
        t0 = time.perf_counter()
        try:
            result = fn()
        except Exception as e:  # every sub-check's failure is a finding, recorded; the others still run
            tb = traceback.format_exc()
            print(tb, flush=True)
            self.data["checks"][name] = {"status": "failed", "seconds": round(time.perf_counter() - t0, 2),
                                         "error": f"{type(e).__name__}: {e}"[:2000], "traceback": tb[-3000:]}
            self.flush()
            return None
        # a check that ran to the end but names failures of its parts (a speed cell's process) keeps its
        # result and counts as failed
        status = "failed" if result.get("failures") else "ok"
        entry = {"status": status, "seconds": round(time.perf_counter() - t0, 2), **result}
        self.data["checks"][name] = entry
        self.flush()
        print(f"    {json.dumps(entry, default=str)[:600]}", flush=True)
        return result


def synchronize(device: str) -> None:
    if device == "cuda":
        import torch

        torch.cuda.synchronize()


def reset_peak_memory(device: str) -> None:
    if device == "cuda":
        import torch

        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def peak_memory_gib(device: str) -> dict[str, float]:
    """Peak device memory since the last reset (CUDA), or this process's peak resident set (CPU)."""
    if device == "cuda":
        import torch

        return {"peak_allocated_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2),
                "peak_reserved_gib": round(torch.cuda.max_memory_reserved() / 2**30, 2)}
    import resource

    return {"peak_rss_gib_process": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2)}


def tensor_diff(a, b, mask=None) -> dict[str, float]:
    """Max and mean absolute difference of two tensors (over ``mask`` where given)."""
    import torch

    a, b = a.detach().float().cpu(), b.detach().float().cpu()
    d = (a - b).abs()
    if mask is not None:
        d = d[mask.bool().cpu()]
    if d.numel() == 0:
        raise ValueError("no elements to compare (empty mask)")
    return {"max_abs_diff": float(d.max()), "mean_abs_diff": float(d.mean()), "n": int(d.numel()),
            "nan": bool(torch.isnan(d).any())}
