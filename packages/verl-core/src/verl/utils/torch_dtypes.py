"""Dtype names as configs spell them (upstream's ``PrecisionType`` spellings and torch's).

Config validation checks names against :data:`DTYPE_NAMES` without importing torch; the engines turn
them into torch dtypes with :func:`to_dtype`.
"""

from __future__ import annotations

from typing import Any

#: accepted spelling -> torch dtype attribute name
DTYPE_NAMES = {
    "fp32": "float32", "float32": "float32", "32": "float32",
    "bf16": "bfloat16", "bfloat16": "bfloat16",
    "fp16": "float16", "float16": "float16", "16": "float16",
}


def to_dtype(name: Any, key: str = "dtype"):
    """A dtype name (``fp32``, ``bf16``, ``bfloat16``, ...) -> ``torch.dtype``; ``key`` names it in errors."""
    import torch

    if str(name) not in DTYPE_NAMES:
        raise ValueError(f"{key}={name!r} is not a known dtype; known: {', '.join(DTYPE_NAMES)}")
    return getattr(torch, DTYPE_NAMES[str(name)])
