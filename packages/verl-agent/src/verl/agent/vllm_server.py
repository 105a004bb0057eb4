"""`AsyncLLMServer` over vLLM's async engine: agent loops and the chat endpoint generate through the
``vllm`` rollout (``actor_rollout_ref.rollout.name=vllm``, ``rollout.mode=async``), token in / token
out, with continuous batching done by vLLM.

The engine itself (AsyncLLM on its own event loop, weight sync, sleep/wake) belongs to verl-workers
(`verl.workers.rollout.vllm_rollout`), like every rollout engine; this adapter only speaks verl-agent's
interface, which verl-workers cannot import (dependencies flow core <- workers <- agent).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from verl.agent.server import AsyncLLMServer, TokenOutput, check_request


class VLLMAsyncServer(AsyncLLMServer):
    """Serve ``rollout`` (a ``VLLMRollout`` built with ``rollout.mode=async``); decoding of a request
    stops at the first of ``stop_token_ids`` (kept in the output)."""

    def __init__(self, rollout: Any, stop_token_ids: Sequence[int]):
        if not stop_token_ids:
            raise ValueError("VLLMAsyncServer needs at least one stop token id (EOS / end of turn)")
        if rollout.config.mode != "async":
            raise ValueError(
                f"agent loops on rollout.name=vllm need rollout.mode=async (got {rollout.config.mode!r})"
            )
        self.rollout = rollout
        self.stop_token_ids = list(stop_token_ids)

    async def generate(
        self, prompt_ids: list[int], sampling_params: dict[str, Any], request_id: str
    ) -> TokenOutput:
        from verl.workers.rollout.hf_rollout import SamplingParams

        check_request(prompt_ids, sampling_params, request_id)
        params = SamplingParams(
            response_length=int(sampling_params["max_tokens"]),
            do_sample=bool(sampling_params.get("do_sample", True)),
            temperature=float(sampling_params.get("temperature", 1.0)),
            top_k=int(sampling_params.get("top_k", -1)),
            top_p=float(sampling_params.get("top_p", 1.0)),
        )
        out = await self.rollout.agenerate(list(prompt_ids), params, request_id, self.stop_token_ids)
        stopped = bool(out.token_ids) and out.token_ids[-1] in self.stop_token_ids
        reason = "stop" if stopped else "length"
        return TokenOutput(list(out.token_ids), list(out.log_probs), reason, out.versions)
