"""A local OpenAI-compatible chat server whose "model" is the built-in task's rule-based user.

The CPU default reaches its simulated user the way the paper setting reaches an LLM: the
``collabllm`` interaction renders the simulator prompt, verl-rewards' `ChatClient` POSTs it to
``/v1/chat/completions``, and the JSON reply is parsed. Here the server reads the prompt's sections
(the complete request and the conversation, between the interaction's markers), asks
`verl_recipe_collabllm.task.simulate_user` and answers with its JSON. Standard library HTTP server,
one thread per request, bound to 127.0.0.1 on a free port.

    with RuleUserServer() as server:     # or server.start() / server.stop()
        server.base_url                  # http://127.0.0.1:<port>/v1
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from verl.utils.json_http import send_json

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


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def _send(self, status: int, payload: dict[str, Any]) -> None:
        send_json(self, status, payload)

    def do_GET(self):  # noqa: N802
        if self.path.rstrip("/") == "/v1/models":
            self._send(200, {"object": "list", "data": [{"id": MODEL_NAME, "object": "model"}]})
        else:
            self._send(404, {"error": {"message": f"no route GET {self.path}"}})

    def do_POST(self):  # noqa: N802
        if self.path.rstrip("/") != "/v1/chat/completions":
            self._send(
                404, {"error": {"message": f"no route POST {self.path}; serving /v1/chat/completions"}}
            )
            return
        try:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            prompt = body["messages"][-1]["content"]
            reply = rule_user_reply(prompt, self.server.simulate)
        except (ValueError, KeyError, IndexError, TypeError) as e:
            self._send(
                400, {"error": {"message": f"{type(e).__name__}: {e}", "type": "invalid_request_error"}}
            )
            return
        with self.server.lock:
            self.server.requests_served += 1
        self._send(
            200,
            {
                "object": "chat.completion",
                "model": body.get("model", MODEL_NAME),
                "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": reply}, "finish_reason": "stop"}
                ],
            },
        )

    def log_message(self, *args: Any) -> None:
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, simulate: Callable[[str, str], dict]):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.simulate = simulate
        self.lock = threading.Lock()
        self.requests_served = 0


class RuleUserServer:
    """The rule-based user behind ``/v1/chat/completions`` (see module doc)."""

    def __init__(self, simulate: Callable[[str, str], dict] = task.simulate_user):
        self.simulate = simulate
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        if self._server is None:
            raise RuntimeError("RuleUserServer is not running; call start() first")
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    @property
    def requests_served(self) -> int:
        return self._server.requests_served if self._server is not None else 0

    def start(self) -> str:
        self._server = _Server(self.simulate)
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="rule-user-server", daemon=True
        )
        self._thread.start()
        return self.base_url

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> RuleUserServer:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()
