"""``rollout.name=vllm`` (extra ``verl-workers[vllm]``). Importing this package registers the engine
without importing vLLM; vLLM is imported when an engine is built."""

from verl.workers.rollout.vllm_rollout.vllm_rollout import VLLMRollout

__all__ = ["VLLMRollout"]
