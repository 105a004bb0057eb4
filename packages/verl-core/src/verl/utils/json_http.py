"""The few lines every small JSON-over-HTTP endpoint here repeats (a sandbox server, a simulated user, test
stubs of OpenAI-compatible servers), on the standard library's ``http.server``."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler
from typing import Any

__all__ = ["send_json"]


def send_json(handler: BaseHTTPRequestHandler, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
    """Answer the request ``handler`` is serving with ``payload`` as a JSON body (and extra ``headers``)."""
    data = json.dumps(payload).encode()
    handler.send_response(status)
    for key, value in (headers or {}).items():
        handler.send_header(key, value)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)
