"""The driver's own checkpoint: step, data position, RNG states, KL controller (``trainer_state.pt``)."""

from __future__ import annotations

import os
import random
from typing import Any

import numpy as np
import torch

TRAINER_STATE_FILE = "trainer_state.pt"


def get_rng_state() -> dict[str, Any]:
    """Python, NumPy and torch RNG states of this process (CUDA too when present)."""
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_trainer_state(ckpt_dir: str, state: dict[str, Any]) -> str:
    """Write ``state`` to ``{ckpt_dir}/trainer_state.pt`` (fsynced); returns the file path."""
    path = os.path.join(ckpt_dir, TRAINER_STATE_FILE)
    with open(path, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    return path


def load_trainer_state(ckpt_dir: str) -> dict[str, Any]:
    path = os.path.join(ckpt_dir, TRAINER_STATE_FILE)
    if not os.path.exists(path):
        raise FileNotFoundError(
            f"{ckpt_dir} has no {TRAINER_STATE_FILE}; it is not a trainer checkpoint "
            f"(expected a global_step_N dir written by RayPPOTrainer)"
        )
    # Our own file with RNG tuples and numpy arrays inside: weights_only would reject those.
    return torch.load(path, map_location="cpu", weights_only=False)
