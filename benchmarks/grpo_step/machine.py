"""What a benchmark ran on: the processor (model and the flags that decide bf16) and the torch build.

Every step server reports :func:`torch_build` of its own interpreter in its ``READY`` line, so a table
can show that ours, bare and TRL ran the same torch (``same_torch``); the harness adds
:func:`processor` once. :func:`torch_build` imports nothing of this project (TRL's driver uses it).
"""

from __future__ import annotations


def processor() -> dict:
    """Model name, architecture, the flags that matter here and whether bf16 matmuls are native
    (``verl.utils.cpu_features``, the same reading the engine's ``param_dtype=auto`` makes)."""
    from verl.utils.cpu_features import REPORTED_FLAGS, cpu_info

    info = cpu_info()
    return {
        "model": info.model_name,
        "arch": info.arch,
        "flags": [f for f in REPORTED_FLAGS if f in info.flags],
        "native_bf16": info.native_bf16,
        "describe": info.describe(),
    }


def torch_build() -> dict:
    """This interpreter's torch: version, commit, CUDA build (None: a CPU build), CPU kernels' ISA."""
    import torch

    return {
        "version": torch.__version__,
        "git": torch.version.git_version[:12],
        "cuda": torch.version.cuda,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
    }


def describe_torch(b: dict) -> str:
    build = f"CUDA {b['cuda']} build" if b["cuda"] else "CPU build"
    return f"torch {b['version']} (git {b['git']}, {build}, CPU kernels {b['cpu_capability']})"


def same_torch(builds: dict[str, dict]) -> str:
    """One line: the torch every side ran, or each side's when they differ (a flaw in any ratio)."""
    texts = {name: describe_torch(b) for name, b in builds.items() if b}
    if len(set(texts.values())) == 1:
        return f"{next(iter(texts.values()))}, the same for {', '.join(texts)}"
    return "DIFFERENT torch builds, ratios mix library and torch: " + "; ".join(
        f"{name}: {text}" for name, text in texts.items()
    )
