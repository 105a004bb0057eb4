"""Rollout engines (``actor_rollout_ref.rollout.name``): the base class, the registry helpers, the
HF and native engines, the vLLM and SGLang engines (registered here; their libraries are imported only
when one is built) and the weight-sync seam for engines that hold their own weights."""

from verl.workers.rollout.base import (
    BaseRollout,
    build_rollout,
    get_rollout_class,
    register_rollout,
    rollout_generator,
)
from verl.workers.rollout.hf_rollout import HFRollout
from verl.workers.rollout.native_rollout import NativeRollout
from verl.workers.rollout.sglang_rollout import SGLangRollout
from verl.workers.rollout.vllm_rollout import VLLMRollout

__all__ = [
    "BaseRollout",
    "HFRollout",
    "NativeRollout",
    "SGLangRollout",
    "VLLMRollout",
    "build_rollout",
    "get_rollout_class",
    "register_rollout",
    "rollout_generator",
]
