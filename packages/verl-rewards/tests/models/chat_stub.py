"""A stub OpenAI-compatible chat endpoint on 127.0.0.1 for the model clients' tests."""

from collections.abc import Iterator
from contextlib import contextmanager

from verl.rewards.http_server import BackgroundServer, HTTPLimits, make_app


@contextmanager
def chat_endpoint(handle) -> Iterator[str]:
    """``POST /v1/chat/completions`` answered by ``handle`` (an aiohttp handler) in a background server;
    yields the base URL (``http://127.0.0.1:<port>/v1``)."""
    app = make_app(HTTPLimits())
    app.router.add_post("/v1/chat/completions", handle)
    with BackgroundServer(app) as srv:
        yield f"{srv.url}/v1"
