"""Shared fixtures: a scripted OpenAI-compatible server on 127.0.0.1 (judge / simulator stand-in) and the
recipe's rule-based user server."""

import threading

import pytest
from aiohttp import web
from verl.rewards.http_server import BackgroundServer, HTTPLimits, make_app, openai_error, read_json


class _Scripted:
    """Answers POST /v1/chat/completions with ``replies[k]`` for the k-th request (the last repeats)."""

    replies: list = ["{}"]
    prompts: list = []
    lock = threading.Lock()

    @classmethod
    async def handle(cls, request: web.Request) -> web.Response:
        body = await read_json(request, HTTPLimits())
        with cls.lock:
            k = len(cls.prompts)
            cls.prompts.append(body["messages"][-1]["content"])
            reply = cls.replies[min(k, len(cls.replies) - 1)]
        return web.json_response({"choices": [{"message": {"role": "assistant", "content": reply}}]})


@pytest.fixture(scope="module")
def scripted_server():
    """``(base_url, set_replies)``: ``set_replies(*texts)`` scripts the next answers and clears the log;
    ``_Scripted.prompts`` holds the prompts received."""
    app = make_app(HTTPLimits(), openai_error)
    app.router.add_post("/v1/chat/completions", _Scripted.handle)

    def set_replies(*texts):
        _Scripted.replies = list(texts)
        _Scripted.prompts = []
        return _Scripted

    with BackgroundServer(app) as srv:
        yield f"{srv.url}/v1", set_replies


@pytest.fixture(scope="module")
def rule_user():
    from verl_recipe_collabllm.sim_server import RuleUserServer

    with RuleUserServer() as server:
        yield server


@pytest.fixture(scope="module")
def char_tok():
    from verl.workers.tiny import build_char_tokenizer

    return build_char_tokenizer()
