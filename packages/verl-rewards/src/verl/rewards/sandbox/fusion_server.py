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
``fetch_files`` are refused (HTTP 422) rather than ignored. Requests run concurrently, bounded by
the local sandbox's ``max_concurrent``.

    uv run python -m verl.rewards.sandbox.fusion_server --port 8080 [--max-concurrent 4]
"""

from __future__ import annotations

import argparse
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from verl.rewards.sandbox import base
from verl.rewards.sandbox.local import LocalSandbox
from verl.utils.json_http import send_json

_FIELDS = {"code", "language", "stdin", "run_timeout", "compile_timeout", "memory_limit_MB", "files",
           "fetch_files", "args"}  # fmt: skip


class RequestError(ValueError):
    """A request SandboxFusion's validation would refuse (answered with HTTP 422)."""


def run_code(sandbox: LocalSandbox, request: dict[str, Any]) -> dict[str, Any]:
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
    memory = int(request.get("memory_limit_MB", -1))
    result = sandbox.run(
        request["code"],
        request.get("stdin") or "",
        timeout=float(request.get("run_timeout", 10)),
        memory_mb=None if memory <= 0 else memory,
    )
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
    ``in_flight`` / ``max_in_flight`` count requests being run (for tests and monitoring)."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, **sandbox_options: Any):
        self.sandbox = LocalSandbox(**sandbox_options)
        self.in_flight = self.max_in_flight = 0
        self._lock = threading.Lock()
        self.httpd = ThreadingHTTPServer((host, port), self._handler())
        self.httpd.daemon_threads = True
        self.url = f"http://{host}:{self.httpd.server_address[1]}"
        self._thread: threading.Thread | None = None

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                if self.path.rstrip("/") != "/run_code":
                    return self._send(404, {"detail": f"no endpoint {self.path}; this service has /run_code"})
                try:
                    body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                    if not isinstance(body, dict):
                        raise RequestError("the request body must be a JSON object")
                    with server._lock:
                        server.in_flight += 1
                        server.max_in_flight = max(server.max_in_flight, server.in_flight)
                    try:
                        return self._send(200, run_code(server.sandbox, body))
                    finally:
                        with server._lock:
                            server.in_flight -= 1
                except (RequestError, json.JSONDecodeError, TypeError, ValueError) as e:
                    return self._send(422, {"detail": str(e)})

            def _send(self, code: int, payload: dict) -> None:
                send_json(self, code, payload)

            def log_message(self, *args: Any) -> None:  # requests are not worth a log line each
                pass

        return Handler

    def start(self) -> FusionServer:
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="fusion-server", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> FusionServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description="SandboxFusion-compatible /run_code over the local sandbox")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--max-concurrent", type=int, default=None)
    parser.add_argument("--isolation", default="auto")
    args = parser.parse_args()
    server = FusionServer(args.host, args.port, max_concurrent=args.max_concurrent, isolation=args.isolation)
    print(f"SandboxFusion-compatible service on {server.url}/run_code (isolation {server.sandbox.isolation.describe()})")
    server.httpd.serve_forever()


if __name__ == "__main__":
    main()
