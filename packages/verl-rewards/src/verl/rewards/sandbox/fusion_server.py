"""A SandboxFusion-compatible ``POST /run_code`` service that really runs the code in our local sandbox.

For developing and testing against the SandboxFusion protocol without its container: the request
and response follow SandboxFusion's ``RunCodeRequest`` / ``RunCodeResponse``::

    request:  {"code", "language", "stdin"?, "run_timeout"=10, "compile_timeout"=10,
               "memory_limit_MB"=-1, "files"={}, "fetch_files"=[], "args"=[]}
    response: {"status": "Success" | "Failed" | "SandboxError", "message",
               "compile_result": null, "run_result": {"status": "Finished" | "TimeLimitExceeded" |
               "Error", "execution_time", "return_code", "stdout", "stderr"},
               "executor_pod_name": null, "files": {}}

Python only (SandboxFusion's ``python`` runner has no compile step, so a syntax error is a run with
return code 1, as there). ``memory_limit_MB=-1`` means the sandbox's default limit. ``files`` and
``fetch_files`` are refused (HTTP 422) rather than ignored.

Everything it does is bounded: the request body (``max_body_mb``, 413 beyond), the time to send it
(408), ``run_timeout`` and ``memory_limit_MB`` (422 above ``max_run_timeout`` / ``max_memory_mb``),
the output returned (the local sandbox's ``max_output_bytes`` per stream), programs running at once
(``max_concurrent``) and requests waiting for one (``max_pending``: 503 with ``Retry-After`` beyond).
Served by aiohttp (`verl.rewards.http_server`), on 127.0.0.1 unless ``--host`` says otherwise.

    uv run python -m verl.rewards.sandbox.fusion_server --port 8080 [--max-concurrent 4]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from aiohttp import web
from verl.rewards.http_server import BackgroundServer, HTTPError, HTTPLimits, make_app, read_json
from verl.rewards.sandbox import base
from verl.rewards.sandbox.local import LocalSandbox

_FIELDS = {"code", "language", "stdin", "run_timeout", "compile_timeout", "memory_limit_MB", "files",
           "fetch_files", "args"}  # fmt: skip


class RequestError(ValueError):
    """A request SandboxFusion's validation would refuse (answered with HTTP 422)."""


def _number(request: dict, key: str, default: float, cap: float) -> float:
    value = request.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise RequestError(f"field {key!r} must be a number, got {value!r:.50}")
    if value > cap:
        raise RequestError(f"field {key!r}={value:g} is above this service's limit of {cap:g}")
    return float(value)


def run_code(
    sandbox: LocalSandbox, request: dict[str, Any], max_run_timeout: float = 60.0, max_memory_mb: int = 4096
) -> dict[str, Any]:
    """One ``/run_code`` request -> its response body (see module doc)."""
    unknown = sorted(set(request) - _FIELDS)
    if unknown:
        raise RequestError(f"unknown request field(s) {unknown}; known: {sorted(_FIELDS)}")
    if not isinstance(request.get("code"), str):
        raise RequestError("field 'code' (a string) is required")
    if request.get("language") != "python":
        raise RequestError(f"language {request.get('language')!r} is not served here; this service runs 'python'")
    if request.get("files") or request.get("fetch_files") or request.get("args"):
        raise RequestError("'files', 'fetch_files' and 'args' are not supported by this service")
    stdin = request.get("stdin") or ""
    if not isinstance(stdin, str):
        raise RequestError(f"field 'stdin' must be a string, got {type(stdin).__name__}")
    timeout = _number(request, "run_timeout", min(10.0, max_run_timeout), max_run_timeout)
    memory = _number(request, "memory_limit_MB", -1, max_memory_mb)
    if timeout <= 0:
        raise RequestError(f"field 'run_timeout' must be > 0, got {timeout:g}")
    result = sandbox.run(request["code"], stdin, timeout=timeout, memory_mb=None if memory <= 0 else int(memory))
    if result.status == base.SANDBOX_ERROR:
        return {"status": "SandboxError", "message": "; ".join(result.notes), "compile_result": None,
                "run_result": None, "executor_pod_name": None, "files": {}}  # fmt: skip
    timed_out = result.status == base.TIMEOUT
    run = {
        "status": "TimeLimitExceeded" if timed_out else "Finished",
        "execution_time": result.wall_time,
        "return_code": None if timed_out else result.exit_code,
        "stdout": result.stdout,
        "stderr": result.stderr,
    }
    ok = not timed_out and result.exit_code == 0
    return {"status": "Success" if ok else "Failed", "message": "", "compile_result": None,
            "run_result": run, "executor_pod_name": None, "files": {}}  # fmt: skip


class FusionServer:
    """The service on ``host:port`` (port 0: a free one) in a background thread; ``url`` is its root.
    ``in_flight`` / ``max_in_flight`` count programs being run, ``pending`` requests admitted (running
    or waiting), ``refused_busy`` requests answered 503 (for tests and monitoring).

    Args:
        max_concurrent: programs run at once (default: CPU count).
        max_pending: requests admitted at once, running or waiting (default: 4 x max_concurrent).
        max_body_mb, body_timeout, idle_timeout: see `verl.rewards.http_server.HTTPLimits`.
        max_run_timeout, max_memory_mb: the largest ``run_timeout`` / ``memory_limit_MB`` accepted.
        **sandbox_options: the local sandbox's (``timeout``, ``memory_mb``, ``isolation``, ...).
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        max_concurrent: int | None = None,
        max_pending: int | None = None,
        max_body_mb: float = 4.0,
        body_timeout: float = 10.0,
        idle_timeout: float = 15.0,
        max_run_timeout: float = 60.0,
        max_memory_mb: int = 4096,
        **sandbox_options: Any,
    ):
        self.max_concurrent = int(max_concurrent or os.cpu_count() or 1)
        self.max_pending = int(max_pending or 4 * self.max_concurrent)
        if self.max_pending < self.max_concurrent:
            raise ValueError(f"max_pending={self.max_pending} must be >= max_concurrent={self.max_concurrent}")
        self.sandbox = LocalSandbox(max_concurrent=self.max_concurrent, **sandbox_options)
        self.max_run_timeout, self.max_memory_mb = float(max_run_timeout), int(max_memory_mb)
        self.limits = HTTPLimits(int(max_body_mb * (1 << 20)), body_timeout, idle_timeout)
        self.in_flight = self.max_in_flight = self.pending = self.refused_busy = 0
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(self.max_concurrent, thread_name_prefix="fusion-run")
        app = make_app(self.limits)
        app.router.add_post("/run_code", self._run_code)
        self.server = BackgroundServer(app, host, port, self.limits)

    @property
    def url(self) -> str:
        return self.server.url

    async def _run_code(self, request: web.Request) -> web.Response:
        body = await read_json(request, self.limits)
        with self._lock:
            if self.pending >= self.max_pending:
                self.refused_busy += 1
                raise HTTPError(
                    503, f"busy: {self.pending} requests admitted (max_pending={self.max_pending})",
                    headers={"Retry-After": "1"},
                )  # fmt: skip
            self.pending += 1
        try:
            result = await asyncio.get_running_loop().run_in_executor(self._pool, self._run, body)
        except RequestError as e:
            raise HTTPError(422, str(e)) from None
        finally:
            with self._lock:
                self.pending -= 1
        return web.json_response(result)

    def _run(self, body: dict) -> dict:
        with self._lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            return run_code(self.sandbox, body, self.max_run_timeout, self.max_memory_mb)
        finally:
            with self._lock:
                self.in_flight -= 1

    def start(self) -> FusionServer:
        self.server.start()
        return self

    def stop(self) -> None:
        self.server.stop()
        self._pool.shutdown(wait=True)

    def __enter__(self) -> FusionServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description="SandboxFusion-compatible /run_code over the local sandbox")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback only)")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--max-concurrent", type=int, default=None, help="programs run at once (CPU count)")
    parser.add_argument("--max-pending", type=int, default=None, help="requests admitted at once (4 x concurrent)")
    parser.add_argument("--max-body-mb", type=float, default=4.0)
    parser.add_argument("--isolation", default="auto")
    args = parser.parse_args()
    server = FusionServer(args.host, args.port, max_concurrent=args.max_concurrent, max_pending=args.max_pending,
                          max_body_mb=args.max_body_mb, isolation=args.isolation).start()  # fmt: skip
    print(f"SandboxFusion-compatible service on {server.url}/run_code "
          f"(isolation {server.sandbox.isolation.describe()})", flush=True)  # fmt: skip
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        server.stop()


if __name__ == "__main__":
    main()
