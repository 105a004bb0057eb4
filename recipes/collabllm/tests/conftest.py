"""Shared fixtures: a scripted OpenAI-compatible server on 127.0.0.1 (judge / simulator stand-in) and the
recipe's rule-based user server."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from verl.utils.json_http import send_json


class _Scripted(BaseHTTPRequestHandler):
    """Answers POST /v1/chat/completions with ``replies[k]`` for the k-th request (the last repeats)."""

    replies: list = ["{}"]
    prompts: list = []
    lock = threading.Lock()

    def do_POST(self):  # noqa: N802
        cls = type(self)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with cls.lock:
            k = len(cls.prompts)
            cls.prompts.append(body["messages"][-1]["content"])
            reply = cls.replies[min(k, len(cls.replies) - 1)]
        send_json(self, 200, {"choices": [{"message": {"role": "assistant", "content": reply}}]})

    def log_message(self, *a):
        pass


@pytest.fixture(scope="module")
def scripted_server():
    """``(base_url, set_replies)``: ``set_replies(*texts)`` scripts the next answers and clears the log;
    ``_Scripted.prompts`` holds the prompts received."""
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Scripted)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()

    def set_replies(*texts):
        _Scripted.replies = list(texts)
        _Scripted.prompts = []
        return _Scripted

    yield f"http://127.0.0.1:{srv.server_address[1]}/v1", set_replies
    srv.shutdown()


@pytest.fixture(scope="module")
def rule_user():
    from verl_recipe_collabllm.sim_server import RuleUserServer

    with RuleUserServer() as server:
        yield server


@pytest.fixture(scope="module")
def char_tok():
    from verl.workers.tiny import build_char_tokenizer

    return build_char_tokenizer()
