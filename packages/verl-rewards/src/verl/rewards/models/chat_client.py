"""One client for OpenAI-compatible ``/chat/completions`` endpoints: judges, simulated users, any LLM call.

It talks to whatever serves the OpenAI chat API: a hosted API (key from an environment variable),
``vllm serve``, SGLang, TGI, verl-agent's ``ChatCompletionServer`` over a local model, or a litellm
proxy in front of providers that speak another protocol. Plain ``requests`` (no SDK): one POST per
call, so the same code serves synchronous callers (``chat``) and asyncio ones (``achat``, on the
client's own threads).

Behaviour:

- **time-outs**: ``timeout`` seconds per attempt (connect and read);
- **retries with backoff**: connection errors, time-outs and HTTP 408/409/425/429/5xx are retried up
  to ``max_retries`` times, waiting ``backoff * 2**k`` seconds (capped at ``max_backoff``, jittered
  down by at most half so many clients do not retry in lockstep; a ``Retry-After`` header is honoured
  up to the cap). Other 4xx answers (bad request, bad key, unknown model) are not retried;
- **concurrency limit**: at most ``max_concurrency`` requests in flight per client, over all threads
  and event loops (a retry waiting out its backoff holds no slot);
- **clear errors**: `ChatClientError` names the endpoint, the model, the attempts and what went wrong
  (status and the start of the body, or the transport error), with a hint for 401/404.

Config dicts (``from_kwargs``) use litellm's names where it has them (``model``, ``api_base``,
``num_retries``, ``timeout``, ``max_tokens``, ``temperature`` ...), so upstream configs port; the API key
is never a config value: ``api_key_env`` names the environment variable that holds it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import random
import threading
import time
from typing import Any

import requests

RETRY_STATUSES = frozenset({408, 409, 425, 429, 500, 502, 503, 504})
# Request-body parameters a config may set (sent with every call unless a call overrides them).
GENERATION_PARAMS = (
    "max_tokens",
    "temperature",
    "top_p",
    "seed",
    "stop",
    "presence_penalty",
    "frequency_penalty",
    "extra_body",
)
CLIENT_OPTIONS = (
    "model",
    "api_base",
    "base_url",
    "api_key_env",
    "timeout",
    "num_retries",
    "max_retries",
    "backoff",
    "max_backoff",
    "max_concurrency",
)


class ChatClientError(RuntimeError):
    """A chat call that failed for good. ``status`` is the last HTTP status (None: no answer)."""

    def __init__(self, message: str, status: int | None = None, attempts: int = 0):
        super().__init__(message)
        self.status = status
        self.attempts = attempts


class _Retryable(Exception):
    def __init__(self, detail: str, status: int | None = None, retry_after: float | None = None):
        super().__init__(detail)
        self.status = status
        self.retry_after = retry_after


class ChatClient:
    """``chat(messages, **params) -> str`` against ``{base_url}/chat/completions`` (see module doc).

    Args:
        base_url: the API root, e.g. ``http://127.0.0.1:8000/v1`` or ``https://api.openai.com/v1``.
        model: the served model name sent in every request.
        api_key_env: name of the environment variable holding the key (sent as a Bearer token);
            it must be set when named.
        timeout: seconds per attempt. max_retries: extra attempts after the first.
        backoff / max_backoff: first wait and cap, in seconds. max_concurrency: requests in flight.
        params: request-body parameters for every call (``GENERATION_PARAMS``).
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key_env: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 3,
        backoff: float = 1.0,
        max_backoff: float = 30.0,
        max_concurrency: int = 8,
        params: dict[str, Any] | None = None,
    ):
        if not base_url or not str(base_url).startswith(("http://", "https://")):
            raise ValueError(
                f"chat client: base_url must be an http(s) URL such as http://127.0.0.1:8000/v1, got {base_url!r}"
            )
        if not model:
            raise ValueError(f"chat client for {base_url}: model (the served model name) is required")
        if timeout <= 0 or max_retries < 0 or backoff < 0 or max_backoff < 0 or max_concurrency < 1:
            raise ValueError(
                f"chat client for {base_url}: need timeout > 0, max_retries >= 0, backoff >= 0, "
                f"max_backoff >= 0, max_concurrency >= 1; got timeout={timeout}, max_retries={max_retries}, "
                f"backoff={backoff}, max_backoff={max_backoff}, max_concurrency={max_concurrency}"
            )
        unknown = sorted(set(params or {}) - set(GENERATION_PARAMS))
        if unknown:
            raise ValueError(
                f"chat client for {base_url}: unknown request parameters {unknown}; known: {list(GENERATION_PARAMS)}"
            )
        if api_key_env and not os.environ.get(api_key_env):
            raise ValueError(
                f"chat client for {base_url}: api_key_env={api_key_env!r} but that environment variable is "
                "not set (export the key, or drop api_key_env for an endpoint without a key)"
            )
        self.base_url = str(base_url).rstrip("/")
        self.endpoint = self.base_url + "/chat/completions"
        self.model = str(model)
        self.api_key_env = api_key_env
        self.timeout = float(timeout)
        self.max_retries = int(max_retries)
        self.backoff = float(backoff)
        self.max_backoff = float(max_backoff)
        self.max_concurrency = int(max_concurrency)
        self.params = dict(params or {})
        self._slots = threading.BoundedSemaphore(self.max_concurrency)
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self._random = random.Random(0)
        #: counters since construction: calls, attempts, retries, failures (calls that raised)
        self.stats = {"calls": 0, "attempts": 0, "retries": 0, "failures": 0}

    @classmethod
    def from_kwargs(cls, kwargs: dict[str, Any], where: str = "chat client") -> ChatClient:
        """Build from a config dict (litellm's key names; see module doc). ``where`` names the config
        section in errors."""
        kwargs = dict(kwargs)
        if "api_key" in kwargs:
            raise ValueError(
                f"{where}: api_key must not be written in a config (it would be saved with the run); put it in "
                "an environment variable and name that variable with api_key_env"
            )
        unknown = sorted(set(kwargs) - set(CLIENT_OPTIONS) - set(GENERATION_PARAMS))
        if unknown:
            raise ValueError(
                f"{where}: unknown keys {unknown}; known: {list(CLIENT_OPTIONS)} and request parameters "
                f"{list(GENERATION_PARAMS)}"
            )
        if "api_base" in kwargs and "base_url" in kwargs:
            raise ValueError(f"{where}: give api_base or base_url, not both")
        if "num_retries" in kwargs and "max_retries" in kwargs:
            raise ValueError(f"{where}: give num_retries or max_retries, not both")
        base_url = kwargs.pop("api_base", None) or kwargs.pop("base_url", None)
        if not base_url:
            raise ValueError(
                f"{where}: api_base is required (e.g. https://api.openai.com/v1 with api_key_env: OPENAI_API_KEY, "
                "or http://127.0.0.1:8000/v1 for a local vllm serve)"
            )
        retries = kwargs.pop("num_retries", kwargs.pop("max_retries", 3))
        options = {
            k: kwargs.pop(k)
            for k in ("api_key_env", "timeout", "backoff", "max_backoff", "max_concurrency")
            if k in kwargs
        }
        model = kwargs.pop("model", None)
        try:
            return cls(base_url, model, max_retries=int(retries), params=kwargs, **options)
        except ValueError as e:
            raise ValueError(f"{where}: {e}") from e

    # ------------------------------------------------------------------------------------------ calls
    def chat(self, messages: list[dict[str, Any]], **params: Any) -> str:
        """The assistant message content for ``messages``; ``params`` override the client's defaults."""
        body = {"model": self.model, "messages": list(messages), **self.params, **params}
        extra = body.pop("extra_body", None) or {}
        body.update(extra)
        headers = {"Content-Type": "application/json"}
        if self.api_key_env:
            headers["Authorization"] = f"Bearer {os.environ.get(self.api_key_env, '')}"
        with self._lock:
            self.stats["calls"] += 1
        last: _Retryable | None = None
        for attempt in range(self.max_retries + 1):
            if attempt:
                time.sleep(self._delay(attempt - 1, last.retry_after if last else None))
                with self._lock:
                    self.stats["retries"] += 1
            try:
                with self._slots:
                    with self._lock:
                        self.stats["attempts"] += 1
                    return self._post(body, headers, attempt + 1)
            except _Retryable as e:
                last = e
            except ChatClientError:
                with self._lock:
                    self.stats["failures"] += 1
                raise
        with self._lock:
            self.stats["failures"] += 1
        raise ChatClientError(
            f"chat endpoint {self.endpoint} (model {self.model!r}): no answer after {self.max_retries + 1} "
            f"attempt(s) (timeout {self.timeout:g} s each, max_retries={self.max_retries}); last: {last}",
            status=last.status if last else None,
            attempts=self.max_retries + 1,
        )

    async def achat(self, messages: list[dict[str, Any]], **params: Any) -> str:
        """`chat` from asyncio code: runs on the client's own threads (at most ``max_concurrency``),
        so the event loop stays free and a new loop per rollout (``asyncio.run``) is fine."""
        with self._lock:
            if self._executor is None:
                self._executor = concurrent.futures.ThreadPoolExecutor(
                    max_workers=self.max_concurrency, thread_name_prefix="chat-client"
                )
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, lambda: self.chat(messages, **params))

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=False)
            self._executor = None

    def __getstate__(self) -> dict[str, Any]:
        # Locks and threads do not pickle (a client may travel to a Ray worker): rebuilt on arrival.
        state = dict(self.__dict__)
        for key in ("_slots", "_executor", "_lock"):
            state.pop(key)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._slots = threading.BoundedSemaphore(self.max_concurrency)
        self._executor = None
        self._lock = threading.Lock()

    # ------------------------------------------------------------------------------------------ internals
    def _delay(self, k: int, retry_after: float | None) -> float:
        delay = min(self.max_backoff, self.backoff * 2**k)
        with self._lock:
            delay *= 1.0 - 0.5 * self._random.random()
        if retry_after is not None:
            delay = max(delay, min(retry_after, self.max_backoff))
        return delay

    def _post(self, body: dict[str, Any], headers: dict[str, str], attempt: int) -> str:
        try:
            resp = requests.post(self.endpoint, json=body, headers=headers, timeout=self.timeout)
        except requests.Timeout as e:
            raise _Retryable(f"timed out after {self.timeout:g} s ({type(e).__name__})") from e
        except requests.ConnectionError as e:
            raise _Retryable(f"connection failed: {e}") from e
        if resp.status_code in RETRY_STATUSES:
            raise _Retryable(
                f"HTTP {resp.status_code}: {resp.text[:300]!r}", resp.status_code, _retry_after(resp)
            )
        where = f"chat endpoint {self.endpoint} (model {self.model!r})"
        if resp.status_code != 200:
            hint = {
                401: f"; check the key in ${self.api_key_env}"
                if self.api_key_env
                else "; the endpoint wants a key (api_key_env)",
                403: "; the key lacks access to this model",
                404: "; is the base URL right (it usually ends in /v1) and is the model served there?",
            }.get(resp.status_code, "")
            raise ChatClientError(
                f"{where} answered HTTP {resp.status_code} on attempt {attempt} (not retried: a client error): "
                f"{resp.text[:300]!r}{hint}",
                status=resp.status_code,
                attempts=attempt,
            )
        try:
            content = resp.json()["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError) as e:
            raise ChatClientError(
                f"{where} answered 200 but not an OpenAI chat completion ({type(e).__name__}: {e}): "
                f"{resp.text[:300]!r}",
                status=200,
                attempts=attempt,
            ) from e
        if not isinstance(content, str):
            raise ChatClientError(
                f"{where} answered a message without text content: {resp.text[:300]!r}",
                status=200,
                attempts=attempt,
            )
        return content


def _retry_after(resp: requests.Response) -> float | None:
    value = resp.headers.get("Retry-After")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None  # an HTTP date: fall back to our own backoff
