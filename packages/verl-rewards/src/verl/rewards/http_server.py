"""Small JSON services on aiohttp, with limits: what our HTTP endpoints share.

The SandboxFusion-compatible ``/run_code`` service, verl-agent's OpenAI-compatible chat endpoint and
CollabLLM's rule-based user are served by aiohttp (one well-kept framework for all of them) through
this module, which adds what every one of them needs and aiohttp leaves to the application:

- bound to loopback unless told otherwise (``host="127.0.0.1"``);
- a request body over ``max_body_bytes`` is refused with 413 before it is read to the end
  (aiohttp's ``client_max_size``); a body that does not arrive within ``body_timeout`` seconds gets
  408; a connection that sends no complete request within ``idle_timeout`` seconds is closed
  (aiohttp's keep-alive timer, which since 3.14 also runs before a connection's first request);
  headers over 8 KiB a line or 128 fields get aiohttp's 400;
- malformed JSON, or JSON that is not an object, gets 400 with the parser's message; every error
  is a JSON body in the service's own error shape (``error_body``), and the service keeps serving.

`BackgroundServer` runs an app in a thread of its own (for synchronous code and tests);
`start_site` runs one in the caller's event loop.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

logger = logging.getLogger(__name__)

__all__ = ["BackgroundServer", "HTTPError", "HTTPLimits", "detail_error", "make_app", "openai_error", "read_json",
           "start_site"]


@dataclass(frozen=True)
class HTTPLimits:
    """Bounds of one service: body size (bytes), seconds to receive a body, seconds a connection may
    stay without a complete request."""

    max_body_bytes: int = 4 << 20
    body_timeout: float = 10.0
    idle_timeout: float = 15.0

    def __post_init__(self):
        for name in ("max_body_bytes", "body_timeout", "idle_timeout"):
            if not getattr(self, name) > 0:
                raise ValueError(f"HTTPLimits.{name} must be > 0, got {getattr(self, name)!r}")


ErrorBody = Callable[[int, str], dict]


def detail_error(status: int, message: str) -> dict:
    """FastAPI's error shape, which SandboxFusion answers with."""
    return {"detail": message}


def openai_error(status: int, message: str) -> dict:
    """The OpenAI API's error shape (chat endpoints)."""
    kind = "invalid_request_error" if status < 500 else "server_error"
    return {"error": {"message": message, "type": kind, "code": status}}


class HTTPError(Exception):
    """Raised by a handler: answered with ``status`` and the service's JSON error body."""

    def __init__(self, status: int, message: str, headers: dict | None = None):
        super().__init__(message)
        self.status, self.headers = status, headers


async def read_json(request: web.Request, limits: HTTPLimits) -> dict:
    """The request body as a JSON object; `HTTPError` 413 / 408 / 400 otherwise."""
    try:
        raw = await asyncio.wait_for(request.read(), limits.body_timeout)
    except web.HTTPRequestEntityTooLarge:
        raise HTTPError(413, f"request body larger than the limit of {limits.max_body_bytes} bytes") from None
    except TimeoutError:
        raise HTTPError(408, f"request body not received within {limits.body_timeout:g} s") from None
    try:
        body = json.loads(raw or b"{}")
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise HTTPError(400, f"request body is not JSON: {e}") from None
    if not isinstance(body, dict):
        raise HTTPError(400, f"request body must be a JSON object, got {type(body).__name__}")
    return body


def make_app(limits: HTTPLimits, error_body: ErrorBody = detail_error) -> web.Application:
    """An application with the body limit; `HTTPError` and aiohttp's own errors (unknown route, method)
    answered in ``error_body``'s shape."""

    @web.middleware
    async def errors_as_json(request: web.Request, handler):
        try:
            return await handler(request)
        except HTTPError as e:
            status, message, headers = e.status, str(e), e.headers
        except web.HTTPException as e:
            if e.status < 400:
                raise
            status, message, headers = e.status, f"{e.reason}: {request.method} {request.path}", None
        except Exception as e:  # a bug of ours: say so in the service's error shape, keep serving
            logger.exception("%s %s failed", request.method, request.path)
            status, message, headers = 500, f"internal error: {type(e).__name__}: {e}", None
        return web.json_response(error_body(status, message), status=status, headers=headers)

    return web.Application(client_max_size=limits.max_body_bytes, middlewares=[errors_as_json])


async def start_site(app: web.Application, host: str, port: int, limits: HTTPLimits) -> tuple[web.AppRunner, int]:
    """Serve ``app`` on ``host:port`` (0: a free port) in the running event loop: ``(runner, port)``."""
    # lingering_time=0: a request whose body was not read to the end (408, 413) closes the connection
    # at once instead of waiting to drain the rest of the body.
    runner = web.AppRunner(app, access_log=None, keepalive_timeout=limits.idle_timeout, lingering_time=0,
                           shutdown_timeout=1.0)  # fmt: skip
    await runner.setup()
    site = web.TCPSite(runner, host, port, backlog=1024)  # a burst of clients is not refused at connect
    await site.start()
    return runner, runner.addresses[0][1]


class BackgroundServer:
    """``app`` on ``host:port`` in a thread with its own event loop; ``url`` is ``http://host:port``.
    Use as a context manager or `start` / `stop`."""

    def __init__(self, app: web.Application, host: str = "127.0.0.1", port: int = 0, limits: HTTPLimits | None = None):
        self.app, self.host, self.port = app, host, port
        self.limits = limits or HTTPLimits()
        self.loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        if self._runner is None:
            raise RuntimeError("the server is not running; call start() first")
        return f"http://{self.host}:{self.port}"

    def start(self) -> BackgroundServer:
        ready: list[Any] = []
        started = threading.Event()

        def serve() -> None:
            loop = self.loop = asyncio.new_event_loop()
            try:
                self._runner, self.port = loop.run_until_complete(start_site(self.app, self.host, self.port, self.limits))
            except BaseException as e:  # handed to the starting thread: a taken port must fail start()
                ready.append(e)
                started.set()
                loop.close()
                return
            started.set()
            loop.run_forever()
            loop.run_until_complete(self._runner.cleanup())
            loop.close()

        self._thread = threading.Thread(target=serve, name=f"http-{self.host}:{self.port}", daemon=True)
        self._thread.start()
        started.wait()
        if ready:
            self._runner = None
            raise ready[0]
        return self

    def stop(self) -> None:
        if self._thread is None or self.loop is None:
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self._thread = None
        self._runner = None

    def __enter__(self) -> BackgroundServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
