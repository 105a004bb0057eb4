"""Rollout engines (``actor_rollout_ref.rollout.name``): the base class, the registry helpers, the
HF and native engines and the weight-sync seam for engines that hold their own weights."""

from verl.workers.rollout.base import (
    BaseRollout,
    build_rollout,
    get_rollout_class,
    register_rollout,
    rollout_generator,
)
from verl.workers.rollout.hf_rollout import HFRollout
from verl.workers.rollout.native_rollout import NativeRollout

__all__ = [
    "BaseRollout",
    "HFRollout",
    "NativeRollout",
    "build_rollout",
    "get_rollout_class",
    "register_rollout",
    "rollout_generator",
]
