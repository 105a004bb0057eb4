"""``chat_endpoint_agent``: train an agent written for another framework through the chat endpoint.

The loop starts a `ChatCompletionServer` over the policy (once per rollout event loop, on a free
port of 127.0.0.1) and calls the user's agent function for each row:

    agent_fn(base_url, session_id, raw_prompt, **row_fields) -> float | None     # sync or async

The agent talks to ``base_url`` with any OpenAI client, sending ``session_id`` (body field or
``X-Session-Id`` header) with each request. Its completions become the row's trajectory (model
tokens mask 1, what the agent added in between mask 0), cut at ``response_length``; a number it
returns becomes the trajectory's ``reward_score``. ``agent_fn`` comes from ``loop_kwargs`` (a
callable or a ``module.function`` path).
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
from collections.abc import Callable
from typing import Any

from verl.agent.agent_loop import AgentLoopBase, AgentLoopOutput, register_agent_loop
from verl.agent.chat_server import ChatCompletionServer


def _resolve(fn: Callable | str) -> Callable:
    if callable(fn):
        return fn
    module, _, name = str(fn).rpartition(".")
    if not module:
        raise ValueError(f"agent_fn {fn!r}: give a callable or a 'package.module.function' path")
    return getattr(importlib.import_module(module), name)


@register_agent_loop("chat_endpoint_agent")
class ChatEndpointAgentLoop(AgentLoopBase):
    def __init__(
        self, config: Any, server: Any, tokenizer: Any, agent_fn: Callable | str | None = None, **kwargs: Any
    ):
        super().__init__(config, server, tokenizer, **kwargs)
        if agent_fn is None:
            raise ValueError(
                "chat_endpoint_agent needs loop_kwargs['agent_fn'] (the agent to run against the endpoint)"
            )
        self.agent_fn = _resolve(agent_fn)
        self.endpoint = ChatCompletionServer(
            server, tokenizer, default_max_tokens=self.max_response_length, tool_format=str(config.multi_turn.format)
        )
        self._loop: asyncio.AbstractEventLoop | None = None
        self._starting: asyncio.Task | None = None

    async def _base_url(self) -> str:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:  # a new rollout (asyncio.run): the old server died with its loop
            self._loop = loop
            # Concurrent runs all wait on this one start.
            self._starting = loop.create_task(self.endpoint.start("127.0.0.1", 0))
        return await asyncio.shield(self._starting)

    async def run(self, sampling_params: dict[str, Any], **row: Any) -> AgentLoopOutput:
        base_url = await self._base_url()
        session = str(row.pop("request_id"))
        raw_prompt = row.pop("raw_prompt")
        if inspect.iscoroutinefunction(self.agent_fn):
            result = await self.agent_fn(base_url, session, raw_prompt, **row)
        else:  # a blocking client: run it in a thread so the endpoint keeps serving
            result = await asyncio.to_thread(self.agent_fn, base_url, session, raw_prompt, **row)
        traj = self.endpoint.trajectory(session)
        del self.endpoint.records[session]
        exceeded = len(traj.response_ids) > self.max_response_length
        if exceeded:
            n = self.max_response_length
            traj.response_ids, traj.response_mask = traj.response_ids[:n], traj.response_mask[:n]
            traj.response_logprobs = traj.response_logprobs[:n]
        traj.metrics["response_length_exceeded"] = float(exceeded)
        traj.reward_score = None if result is None else float(result)
        traj.extra_fields["stop_reason"] = "response_length" if exceeded else "done"
        return traj
