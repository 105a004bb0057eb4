"""A local OpenAI-compatible chat server whose "model" is the built-in task's rule-based user.

The CPU default reaches its simulated user the way the paper setting reaches an LLM: the
``collabllm`` interaction renders the simulator prompt, verl-rewards' `ChatClient` POSTs it to
``/v1/chat/completions``, and the JSON reply is parsed. Here the server reads the prompt's sections
(the complete request and the conversation, between the interaction's markers), asks
`verl_recipe_collabllm.task.simulate_user` and answers with its JSON. Served by aiohttp on a thread of
its own (`verl.rewards.http_server`, with its body-size and time limits), bound to 127.0.0.1 on a free
port.

    with RuleUserServer() as server:     # or server.start() / server.stop()
        server.base_url                  # http://127.0.0.1:<port>/v1
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

from aiohttp import web
from verl.rewards.http_server import (
    BackgroundServer,
    HTTPError,
    HTTPLimits,
    make_app,
    openai_error,
    read_json,
)

from verl_recipe_collabllm import task
from verl_recipe_collabllm.interaction import CHAT_END, CHAT_START, GOAL_END, GOAL_START

MODEL_NAME = "collabllm-rule-user"


def section(prompt: str, start: str, end: str) -> str:
    """The text between two markers of the simulator prompt."""
    if start not in prompt or end not in prompt:
        raise ValueError(
            f"the prompt has no {start!r} ... {end!r} section; is it the collabllm simulator prompt?"
        )
    return prompt.split(start, 1)[1].split(end, 1)[0].strip()


def last_assistant_message(chat: str) -> str:
    """The last ``**Assistant**: ...`` message of a conversation formatted by ``format_chat``."""
    marker = "**Assistant**: "
    if marker not in chat:
        raise ValueError("the conversation has no assistant message to answer")
    tail = chat.rsplit(marker, 1)[1]
    return tail.split("\n**User**: ", 1)[0]


def rule_user_reply(prompt: str, simulate: Callable[[str, str], dict] = task.simulate_user) -> str:
    """The rule-based user's reply (a JSON string) to one simulator prompt."""
    goal = section(prompt, GOAL_START, GOAL_END)
    chat = section(prompt, CHAT_START, CHAT_END)
    return json.dumps(simulate(goal, last_assistant_message(chat)))


class RuleUserServer:
    """The rule-based user behind ``/v1/chat/completions`` (see module doc)."""

    def __init__(self, simulate: Callable[[str, str], dict] = task.simulate_user):
        self.simulate = simulate
        self.limits = HTTPLimits()
        self._server: BackgroundServer | None = None
        self._lock = threading.Lock()
        self._served = 0

    @property
    def base_url(self) -> str:
        if self._server is None:
            raise RuntimeError("RuleUserServer is not running; call start() first")
        return f"{self._server.url}/v1"

    @property
    def requests_served(self) -> int:
        return self._served

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": MODEL_NAME, "object": "model"}]})

    async def _completions(self, request: web.Request) -> web.Response:
        body = await read_json(request, self.limits)
        try:
            reply = rule_user_reply(body["messages"][-1]["content"], self.simulate)
        except (ValueError, KeyError, IndexError, TypeError) as e:
            raise HTTPError(400, f"{type(e).__name__}: {e}") from None
        with self._lock:
            self._served += 1
        return web.json_response(
            {
                "object": "chat.completion",
                "model": body.get("model", MODEL_NAME),
                "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": reply}, "finish_reason": "stop"}
                ],
            }
        )

    def start(self) -> str:
        app = make_app(self.limits, openai_error)
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/chat/completions", self._completions)
        self._server = BackgroundServer(app, "127.0.0.1", 0, self.limits).start()
        return self.base_url

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None

    def __enter__(self) -> RuleUserServer:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()
