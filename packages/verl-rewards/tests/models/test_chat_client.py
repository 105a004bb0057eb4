"""The chat client against a local HTTP server that fails on purpose: retries and their limits, time-outs,
errors that are not retried, the concurrency limit, the key header, and config errors."""

import asyncio
import threading
import time

import pytest
from aiohttp import web
from verl.rewards.http_server import HTTPLimits, read_json
from verl.rewards.models.chat_client import ChatClient, ChatClientError

from .chat_stub import chat_endpoint


class _Flaky:
    """Each POST takes the next behaviour from ``script`` (the last one repeats): an int status (200 answers
    "ok <n>"), ``("sleep", seconds)`` before answering 200, ``("429", retry_after)``, or ``"garbage"``."""

    script: list = [200]
    calls: list = []
    in_flight = 0
    max_in_flight = 0
    lock = threading.Lock()

    @classmethod
    async def handle(cls, request: web.Request) -> web.Response:
        body = await read_json(request, HTTPLimits())
        with cls.lock:
            k = len(cls.calls)
            cls.calls.append((body, dict(request.headers)))
            cls.in_flight += 1
            cls.max_in_flight = max(cls.max_in_flight, cls.in_flight)
            step = cls.script[min(k, len(cls.script) - 1)]
        try:
            headers = {}
            if isinstance(step, tuple) and step[0] == "sleep":
                await asyncio.sleep(step[1])
                status, payload = 200, _completion(f"ok {k}")
            elif isinstance(step, tuple) and step[0] == "429":
                status, payload, headers = 429, {"error": "slow down"}, {"Retry-After": str(step[1])}
            elif step == "garbage":
                status, payload = 200, {"not": "a completion"}
            elif step == 200:
                status, payload = 200, _completion(f"ok {k}")
            else:
                status, payload = int(step), {"error": {"message": f"failing on purpose with {step}"}}
            return web.json_response(payload, status=status, headers=headers)
        finally:
            with cls.lock:
                cls.in_flight -= 1


def _completion(text: str) -> dict:
    return {
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}]
    }


@pytest.fixture(scope="module")
def server():
    with chat_endpoint(_Flaky.handle) as url:
        yield url


@pytest.fixture
def script():
    def set_script(*steps):
        # handlers an earlier test's client timed out on may still be sleeping: let them finish first
        deadline = time.monotonic() + 5
        while _Flaky.in_flight and time.monotonic() < deadline:
            time.sleep(0.02)
        _Flaky.script = list(steps)
        _Flaky.calls = []
        _Flaky.max_in_flight = 0

    return set_script


def _client(url, **kw):
    kw.setdefault("backoff", 0.01)
    kw.setdefault("max_backoff", 0.05)
    return ChatClient(url, "sim-model", **kw)


def test_server_errors_are_retried_until_an_answer(server, script):
    script(500, 503, 200)
    client = _client(server, max_retries=3, params={"temperature": 0.0, "max_tokens": 7})
    assert client.chat([{"role": "user", "content": "hi"}]) == "ok 2"
    assert len(_Flaky.calls) == 3
    body, _ = _Flaky.calls[-1]
    assert body == {
        "model": "sim-model",
        "messages": [{"role": "user", "content": "hi"}],
        "temperature": 0.0,
        "max_tokens": 7,
    }
    assert client.stats == {"calls": 1, "attempts": 3, "retries": 2, "failures": 0}


def test_retries_are_bounded_and_the_error_names_the_endpoint(server, script):
    script(502)
    client = _client(server, max_retries=2)
    with pytest.raises(ChatClientError) as ei:
        client.chat([{"role": "user", "content": "hi"}])
    assert len(_Flaky.calls) == 3  # the first attempt + 2 retries
    msg = str(ei.value)
    assert f"{server}/chat/completions" in msg and "'sim-model'" in msg and "3 attempt(s)" in msg
    assert "HTTP 502" in msg and "failing on purpose" in msg
    assert ei.value.status == 502 and ei.value.attempts == 3
    assert client.stats["failures"] == 1


def test_client_errors_are_not_retried(server, script):
    script(400, 200)
    client = _client(server, max_retries=5)
    with pytest.raises(ChatClientError, match="HTTP 400 on attempt 1 .not retried") as ei:
        client.chat([{"role": "user", "content": "hi"}])
    assert len(_Flaky.calls) == 1 and ei.value.status == 400
    script(404)
    with pytest.raises(ChatClientError, match="ends in /v1"):
        client.chat([{"role": "user", "content": "hi"}])


def test_rate_limit_waits_at_least_retry_after(server, script):
    script(("429", 0.3), 200)
    client = _client(server, max_retries=1, max_backoff=1.0)
    start = time.monotonic()
    assert client.chat([{"role": "user", "content": "hi"}]) == "ok 1"
    assert time.monotonic() - start >= 0.3  # our own backoff alone would wait at most 0.01 s
    assert len(_Flaky.calls) == 2


def test_time_out_is_retried_then_reported(server, script):
    script(("sleep", 1.0), ("sleep", 1.0), 200)
    client = _client(server, timeout=0.2, max_retries=2)
    assert client.chat([{"role": "user", "content": "hi"}]) == "ok 2"
    script(("sleep", 1.0))
    client = _client(server, timeout=0.2, max_retries=1)
    with pytest.raises(
        ChatClientError, match=r"no answer after 2 attempt\(s\) \(timeout 0.2 s each.*timed out"
    ):
        client.chat([{"role": "user", "content": "hi"}])


def test_connection_refused_is_retried_then_reported():
    client = _client("http://127.0.0.1:9/v1", max_retries=2)
    with pytest.raises(ChatClientError, match="connection failed") as ei:
        client.chat([{"role": "user", "content": "hi"}])
    assert ei.value.status is None and client.stats["attempts"] == 3


def test_a_200_that_is_not_a_completion_is_an_error(server, script):
    script("garbage")
    with pytest.raises(ChatClientError, match="not an OpenAI chat completion"):
        _client(server).chat([{"role": "user", "content": "hi"}])
    assert len(_Flaky.calls) == 1


def test_concurrency_limit_over_threads_and_event_loops(server, script):
    script(("sleep", 0.15))
    client = _client(server, max_concurrency=2)

    async def many(k):
        return await asyncio.gather(*(client.achat([{"role": "user", "content": str(i)}]) for i in range(k)))

    assert len(asyncio.run(many(6))) == 6
    assert len(asyncio.run(many(4))) == 4  # a second event loop: the client keeps working
    threads = [
        threading.Thread(target=client.chat, args=([{"role": "user", "content": "t"}],)) for _ in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(_Flaky.calls) == 14
    assert _Flaky.max_in_flight == 2
    client.close()


def test_key_from_the_environment(server, script, monkeypatch):
    script(200)
    monkeypatch.setenv("SIM_KEY_FOR_TEST", "sk-test")
    _client(server, api_key_env="SIM_KEY_FOR_TEST").chat([{"role": "user", "content": "hi"}])
    assert _Flaky.calls[0][1]["Authorization"] == "Bearer sk-test"
    monkeypatch.delenv("SIM_KEY_FOR_TEST")
    with pytest.raises(ValueError, match="SIM_KEY_FOR_TEST.*not set"):
        _client(server, api_key_env="SIM_KEY_FOR_TEST")


def test_from_kwargs_takes_litellm_names_and_refuses_the_rest(server, script):
    script(200)
    client = ChatClient.from_kwargs(
        {"model": "judge", "api_base": server, "num_retries": 1, "max_tokens": 16, "temperature": 0},
        where="llm_judge_kwargs",
    )
    assert (client.base_url, client.model, client.max_retries) == (server, "judge", 1)
    client.chat([{"role": "user", "content": "x"}], temperature=0.5)
    assert _Flaky.calls[0][0]["max_tokens"] == 16 and _Flaky.calls[0][0]["temperature"] == 0.5
    with pytest.raises(ValueError, match="llm_judge_kwargs: unknown keys \\['tempreature'\\]"):
        ChatClient.from_kwargs({"model": "m", "api_base": server, "tempreature": 0}, where="llm_judge_kwargs")
    with pytest.raises(ValueError, match="api_key must not be written in a config"):
        ChatClient.from_kwargs({"model": "m", "api_base": server, "api_key": "sk-1"})
    with pytest.raises(ValueError, match="api_base is required"):
        ChatClient.from_kwargs({"model": "gpt-4o-mini"}, where="user simulator")
    with pytest.raises(ValueError, match="model .* is required"):
        ChatClient.from_kwargs({"api_base": server})


def test_a_client_pickles_and_works_after(server, script):
    import pickle

    script(200)
    client = pickle.loads(pickle.dumps(_client(server, max_concurrency=3)))
    assert client.chat([{"role": "user", "content": "hi"}]) == "ok 0" and client.max_concurrency == 3
