"""The OpenAI-compatible endpoint under malformed, oversized and slow requests: each gets a clear
OpenAI-style error, and the endpoint keeps answering real requests (it runs on its own event loop
thread here, as a rollout's loop would host it)."""

import asyncio
import json
import threading

import pytest
import requests
from verl.agent.chat_server import ChatCompletionServer
from verl.agent.server import ScriptedLLMServer
from verl.rewards.http_testing import raw_exchange, raw_exchanges_meanwhile


@pytest.fixture(scope="module")
def endpoint(tokenizer, stop_ids):
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    server = ChatCompletionServer(
        ScriptedLLMServer(lambda text: "hello", stop_ids, tokenizer), tokenizer,
        max_body_mb=0.01, body_timeout=1.0, idle_timeout=2.0,
    )  # fmt: skip
    base = asyncio.run_coroutine_threadsafe(server.start(), loop).result(60)
    yield base
    asyncio.run_coroutine_threadsafe(server.stop(), loop).result(60)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)


def _chat(base, body, **kw):
    return requests.post(f"{base}/chat/completions", timeout=30, **({"json": body} if body is not None else kw))


def _still_serving(base):
    resp = _chat(base, {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8})
    assert resp.status_code == 200 and resp.json()["choices"][0]["message"]["content"] == "hello", resp.text


def test_the_server_binds_loopback_by_default(endpoint):
    assert endpoint.startswith("http://127.0.0.1:")


def test_malformed_requests_get_openai_errors(endpoint):
    user = [{"role": "user", "content": "hi"}]
    cases = [
        (_chat(endpoint, None, data=b"{oops"), 400, "request body is not JSON"),
        (_chat(endpoint, None, data=b'"a string"'), 400, "must be a JSON object"),
        (_chat(endpoint, {"messages": "hi"}), 400, "'messages' must be a non-empty list"),
        (_chat(endpoint, {"messages": [{"content": "no role"}]}), 400, "messages[0] must be an object with a string 'role'"),
        (_chat(endpoint, {"messages": [{"role": "user", "content": 5}]}), 400, "messages[0].content must be a string"),
        (_chat(endpoint, {"messages": user, "max_tokens": "many"}), 400, "'max_tokens' must be an integer > 0"),
        (_chat(endpoint, {"messages": user, "max_tokens": -3}), 400, "'max_tokens' must be an integer > 0"),
        (_chat(endpoint, {"messages": user, "temperature": "hot"}), 400, "'temperature' must be a number >= 0"),
        (_chat(endpoint, {"messages": user, "top_p": 2}), 400, "'top_p' must be a number in (0, 1]"),
        (_chat(endpoint, {"messages": user, "tools": "add"}), 400, "'tools' must be a list"),
        (_chat(endpoint, {"messages": user + [{"role": "assistant", "content": "", "tool_calls": [{"x": 1}]}]}),
         400, "messages[1].tool_calls must be OpenAI tool calls"),
        (requests.get(endpoint + "/nowhere", timeout=10), 404, "Not Found"),
        (requests.delete(endpoint + "/chat/completions", timeout=10), 405, "Method Not Allowed"),
    ]  # fmt: skip
    for resp, status, words in cases:
        assert resp.status_code == status, (words, resp.text)
        error = resp.json()["error"]
        assert words in error["message"] and error["type"] == "invalid_request_error", resp.text
    assert requests.get(endpoint + "/models", timeout=10).json()["data"][0]["id"] == "verl-policy"
    garbage = raw_exchange(endpoint, b"NOT\x00HTTP\r\n\r\n")
    assert garbage.split(b"\r\n")[0].endswith(b" 400 Bad Request"), garbage[:200]
    _still_serving(endpoint)


def test_an_oversized_request_gets_413(endpoint):
    big = {"messages": [{"role": "user", "content": "x" * 20000}]}
    resp = _chat(endpoint, big)
    assert resp.status_code == 413 and "larger than the limit of 10485 bytes" in resp.json()["error"]["message"]
    _still_serving(endpoint)


def test_slow_requests_are_cut_off_while_others_are_served(endpoint):
    head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 200\r\n\r\n"
    slow = {"body": head + b'{"messages": ', "headers": b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"}
    results = raw_exchanges_meanwhile(endpoint, slow, lambda: _still_serving(endpoint))
    status_line, _, rest = results["body"].partition(b"\r\n")
    assert status_line.endswith(b" 408 Request Timeout"), results["body"][:300]
    assert json.loads(rest.split(b"\r\n\r\n", 1)[1])["error"]["message"] == "request body not received within 1 s"
    assert results["headers"] == b""  # the server closed the idle connection without an answer
    _still_serving(endpoint)
