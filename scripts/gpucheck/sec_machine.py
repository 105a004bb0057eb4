"""Section ``machine``: what ran where (card, driver, versions, commit), what imports, the matmul ceiling.

The dense bf16 peak is the datasheet's for the card's name (MFU's denominator); the bf16 matrix product
measured here (8192^3 on random data, median of 10 after 3 warm-ups; METHOD.md of the device tool) is
the ceiling the card actually reached in this run, reported beside it.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import os
import platform
import shutil
import subprocess
import sys
from typing import Any

from context import ROOT, Context, Recorder

#: dense bf16 tensor-core peak by card name (vendor datasheets; no sparsity), TFLOP/s; first match wins
DENSE_BF16_TFLOPS = (
    ("H100 PCIe", 756.0),
    ("H100 NVL", 835.0),
    ("H100", 989.0),  # SXM5 ("NVIDIA H100 80GB HBM3")
    ("H200", 989.0),  # SXM ("NVIDIA H200"): the H100's arithmetic, more memory
    ("A100", 312.0),
)

#: import name -> distribution, for what the check needs (carried or on the machine)
NEEDED = {
    "torch": "torch", "transformers": "transformers", "omegaconf": "omegaconf", "megatron.core": "megatron-core",
    "trl": "trl", "datasets": "datasets", "math_verify": "math-verify", "peft": "peft", "accelerate": "accelerate",
    "pyarrow": "pyarrow", "tensorboard": "tensorboard", "matplotlib": "matplotlib", "hydra": "hydra-core",
}


def peak_tflops(name: str) -> float | None:
    for key, tflops in DENSE_BF16_TFLOPS:
        if key in name:
            return tflops
    return None


def source_commit() -> dict[str, Any]:
    """The commit: from git where the tree has ``.git``, else from ``.gpu_wheels/SOURCE.json``."""
    proc = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    if proc.returncode == 0:
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True).stdout
        return {"commit": proc.stdout.strip(), "dirty": bool(dirty.strip()), "from": "git"}
    source = ROOT / ".gpu_wheels" / "SOURCE.json"
    if source.exists():
        return {**json.loads(source.read_text()), "from": ".gpu_wheels/SOURCE.json (written by scripts/fetch_gpu_wheels)"}
    return {"commit": None, "from": "unknown: no .git and no .gpu_wheels/SOURCE.json"}


def versions() -> dict[str, Any]:
    out: dict[str, Any] = {"python": sys.version.split()[0], "platform": platform.platform(), "cpus": os.cpu_count()}
    for module, dist in NEEDED.items():
        try:
            importlib.import_module(module)
            out[dist] = importlib.metadata.version(dist)
        except Exception as e:  # a missing package is a finding of this section, not an error
            out[dist] = f"not importable: {type(e).__name__}: {e}"[:200]
    try:
        importlib.import_module("ray")
        out["ray"] = importlib.metadata.version("ray")
    except ImportError:
        out["ray"] = "not installed (the check runs trainer.worker_backend=local)"
    return out


def gpu(device: str) -> dict[str, Any]:
    import torch

    info: dict[str, Any] = {"torch": torch.__version__, "torch_cuda": torch.version.cuda,
                            "cuda_available": torch.cuda.is_available()}
    if device != "cuda":
        info["name"] = f"CPU ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)"
        return info
    props = torch.cuda.get_device_properties(0)
    info.update(name=props.name, memory_gib=round(props.total_memory / 2**30, 1),
                multiprocessors=props.multi_processor_count, capability=f"{props.major}.{props.minor}",
                device_count=torch.cuda.device_count())
    if shutil.which("nvidia-smi") is None:
        info["nvidia_smi"] = "not on PATH"
    else:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,clocks.max.sm",
                              "--format=csv,noheader"], capture_output=True, text=True)
        info["nvidia_smi"] = smi.stdout.strip() or smi.stderr.strip()[:300]
        if smi.returncode == 0 and smi.stdout.strip():
            info["driver"] = smi.stdout.split(",")[1].strip()
    info["dense_bf16_peak_tflops"] = peak_tflops(props.name)
    return info


def matmul_ceiling(device: str, quick: bool) -> dict[str, Any]:
    """Median TFLOP/s of an n^3 matrix product on random data (bf16 on CUDA, fp32 on CPU)."""
    import statistics
    import time

    import torch

    n, dtype, reps = (8192, torch.bfloat16, 10) if device == "cuda" else ((512 if quick else 2048), torch.float32, 5)
    g = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(n, n, device=device, dtype=dtype, generator=g)
    b = torch.randn(n, n, device=device, dtype=dtype, generator=g)
    for _ in range(3):
        torch.mm(a, b)
    times = []
    for _ in range(reps):
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            torch.mm(a, b)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            torch.mm(a, b)
            times.append(time.perf_counter() - t0)
    return {"n": n, "dtype": str(dtype).removeprefix("torch."), "median_tflops": round(2 * n**3 / statistics.median(times) / 1e12, 2)}


def plugins() -> dict[str, Any]:
    """Core finds verl-workers' and verl-rewards' classes through the entry points site_setup.py wrote."""
    from verl.registries import REWARD_MANAGERS, TRAINING_ENGINES, WORKER_CLASSES

    return {"actor_rollout_ref": WORKER_CLASSES.get("actor_rollout_ref").__qualname__,
            "fsdp2": TRAINING_ENGINES.get("fsdp2").__qualname__, "naive": REWARD_MANAGERS.get("naive").__qualname__,
            "verl_paths": list(importlib.import_module("verl").__path__)}


def run(ctx: Context, rec: Recorder) -> None:
    rec.check("source", source_commit)
    rec.check("versions", versions)
    rec.check("gpu", lambda: gpu(ctx.device))
    rec.check("plugins", plugins)
    rec.check("matmul", lambda: matmul_ceiling(ctx.device, ctx.quick))
