"""The SandboxFusion client against a stub server on 127.0.0.1 speaking its /run_code shape."""

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
from verl.rewards.sandbox.fusion import SandboxFusionSandbox
from verl.rewards.scoring.code import compute_score


class _Stub(BaseHTTPRequestHandler):
    requests: list = []

    def do_POST(self):  # noqa: N802 - http.server naming
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append((self.path, body))
        code, stdin = body["code"], body["stdin"]
        # Pretend to run: the stub recognises a few programs by marker comments.
        if "# SLEEP" in code:
            run = {"status": "TimeLimitExceeded", "return_code": None, "stdout": "", "stderr": ""}
        elif "# CRASH" in code:
            run = {"status": "Finished", "return_code": 1, "stdout": "", "stderr": "ZeroDivisionError"}
        else:
            a, b = map(int, stdin.split())
            run = {"status": "Finished", "return_code": 0, "stdout": f"{a + b}\n", "stderr": ""}
        resp = {
            "status": "Success",
            "message": "",
            "compile_result": None,
            "run_result": dict(run, execution_time=0.01),
        }
        data = json.dumps(resp).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *a):
        pass


@pytest.fixture(scope="module")
def server():
    srv = HTTPServer(("127.0.0.1", 0), _Stub)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()


def test_run_code_request_and_result_mapping(server):
    sb = SandboxFusionSandbox(url=server, timeout=3, memory_mb=256)
    _Stub.requests.clear()
    res = sb.run("print(sum(map(int, input().split())))", "2 3")
    assert res.ok and res.stdout == "5\n"
    path, body = _Stub.requests[0]
    assert path == "/run_code"
    assert body == {
        "code": "print(sum(map(int, input().split())))",
        "language": "python",
        "stdin": "2 3",
        "run_timeout": 3.0,
        "memory_limit_MB": 256,
    }
    assert sb.run("# SLEEP", "").status == "timeout"
    assert sb.run("# CRASH", "").status == "error"


def test_code_scorer_through_sandbox_fusion(server):
    gt = {"inputs": ["1 2", "5 5"], "outputs": ["3", "10"]}
    out = compute_score(
        "```python\nprint(1)\n```", gt, sandbox="sandbox_fusion", sandbox_options={"url": server}
    )
    assert out == {"score": 1.0, "pass_rate": 1.0, "failure": "none", "num_tests": 2, "num_passed": 2}


def test_unreachable_server_is_a_sandbox_error_not_a_crash():
    sb = SandboxFusionSandbox(url="http://127.0.0.1:9", retries=0)
    res = sb.run("print(1)")
    assert res.status == "sandbox_error" and "127.0.0.1:9" in res.notes[0]


def test_missing_url_is_an_error():
    with pytest.raises(ValueError, match="reward.sandbox.url"):
        SandboxFusionSandbox()
