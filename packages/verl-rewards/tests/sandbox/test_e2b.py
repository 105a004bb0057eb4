"""The E2B client against an object implementing the part of the e2b-code-interpreter SDK it uses:
``Sandbox(template=, timeout=, api_key=, request_timeout=)`` as a context manager and
``run_code(code, timeout=) -> Execution(logs.stdout, logs.stderr, error, text)``, where the code runs
as a notebook cell would: in a fresh Python process, the last expression's repr as ``text``."""

import importlib.util
import json
import subprocess
import sys
import tempfile
import threading
import types
from dataclasses import dataclass, field

import pytest
from verl.rewards.sandbox import get_sandbox

_CELL = r"""
import ast, json, sys, traceback
src = open(sys.argv[1]).read()
out = {"text": None, "error": None}
try:
    tree = ast.parse(src)
    last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    ns = {"__name__": "__main__"}
    exec(compile(tree, "<cell>", "exec"), ns)
    if last is not None:
        out["text"] = repr(eval(compile(ast.Expression(last.value), "<cell>", "eval"), ns))
except BaseException as e:
    out["error"] = {"name": type(e).__name__, "value": str(e), "traceback": traceback.format_exc()}
sys.stdout.flush(); sys.stderr.flush()
open(sys.argv[2], "w").write(json.dumps(out))
"""


@dataclass
class Logs:
    stdout: list = field(default_factory=list)
    stderr: list = field(default_factory=list)


@dataclass
class ExecutionError:
    name: str
    value: str
    traceback: str


@dataclass
class Execution:
    logs: Logs
    error: ExecutionError | None = None
    text: str | None = None


class FakeSandbox:
    """Runs cells locally (trusted test code only); records what the client asked for."""

    created: list = []
    alive = peak = 0
    lock = threading.Lock()
    fail_on_create = False

    def __init__(self, template=None, timeout=None, api_key=None, request_timeout=None):
        if FakeSandbox.fail_on_create:
            raise RuntimeError("403: invalid API key")
        FakeSandbox.created.append(dict(template=template, timeout=timeout, api_key=api_key,
                                        request_timeout=request_timeout))  # fmt: skip

    def __enter__(self):
        with FakeSandbox.lock:
            FakeSandbox.alive += 1
            FakeSandbox.peak = max(FakeSandbox.peak, FakeSandbox.alive)
        return self

    def __exit__(self, *exc):
        with FakeSandbox.lock:
            FakeSandbox.alive -= 1

    def run_code(self, code, timeout=None):
        with tempfile.TemporaryDirectory() as d:
            cell, result = f"{d}/cell.py", f"{d}/out.json"
            open(cell, "w").write(code)
            try:
                p = subprocess.run([sys.executable, "-c", _CELL, cell, result], capture_output=True, text=True,
                                   timeout=timeout)  # fmt: skip
            except subprocess.TimeoutExpired as e:
                raise TimeoutError(f"Execution timed out after {timeout} s") from e
            out = json.load(open(result))
        error = ExecutionError(**out["error"]) if out["error"] else None
        return Execution(Logs([p.stdout] if p.stdout else [], [p.stderr] if p.stderr else []), error, out["text"])


@pytest.fixture
def e2b(monkeypatch):
    module = types.ModuleType("e2b_code_interpreter")
    module.Sandbox = FakeSandbox
    monkeypatch.setitem(sys.modules, "e2b_code_interpreter", module)
    FakeSandbox.created, FakeSandbox.peak, FakeSandbox.fail_on_create = [], 0, False
    from verl.rewards.sandbox.e2b import E2BSandbox

    return E2BSandbox


def test_runs_with_stdin_and_exit_codes(e2b):
    sb = e2b(timeout=20, memory_mb=512)
    ok = sb.run("print(sum(map(int, input().split())))", "2 3")
    assert ok.ok and ok.stdout == "5\n" and ok.exit_code == 0 and ok.isolation == "e2b"
    err = sb.run("import sys\nprint('partial')\nsys.exit(3)")
    assert err.status == "error" and err.exit_code == 3 and err.stdout == "partial\n"
    crash = sb.run("1 / 0")
    assert crash.status == "error" and "ZeroDivisionError" in crash.stderr


def test_timeout_and_memory_are_honoured(e2b):
    sb = e2b(timeout=20, memory_mb=512)
    slow = sb.run("import time\nprint('started', flush=True)\ntime.sleep(60)", timeout=1)
    assert slow.status == "timeout" and slow.exit_code is None and "1 s" in slow.notes[0]
    big = sb.run("x = bytearray(1024 ** 3)\nprint('allocated')", memory_mb=256)
    assert big.status == "memory_limit" and "allocated" not in big.stdout
    assert sb.run("x = bytearray(64 * 1024 ** 2)\nprint('allocated')").stdout == "allocated\n"


def test_options_reach_the_sdk_or_are_refused(e2b):
    sb = e2b(timeout=5, template="my-template", api_key="k", request_timeout=7)
    sb.run("print(1)", timeout=3)
    assert FakeSandbox.created[-1] == {"template": "my-template", "timeout": 33, "api_key": "k", "request_timeout": 7}
    e2b().run("print(1)")
    assert FakeSandbox.created[-1] == {"template": None, "timeout": 40, "api_key": None, "request_timeout": None}
    with pytest.raises(TypeError, match="memory"):
        e2b(memory=5)  # a misspelt option is an error, not silently dropped
    with pytest.raises(ValueError, match="memory_mb"):
        e2b(memory_mb=0)
    with pytest.raises(ValueError, match="'python' only"):
        e2b().run("x", language="cpp")


def test_concurrency_limit_and_remote_failures(e2b):
    sb = e2b(timeout=20, max_concurrent=2)
    threads = [threading.Thread(target=sb.run, args=("import time\ntime.sleep(0.3)",)) for _ in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(FakeSandbox.created) == 5 and FakeSandbox.peak <= 2
    FakeSandbox.fail_on_create = True
    res = sb.run("print(1)")
    assert res.status == "sandbox_error" and "invalid API key" in res.notes[0]


def test_through_the_registry_with_config_options(e2b):
    sb = get_sandbox("e2b", timeout=4.0, memory_mb=300)
    assert sb.memory_mb == 300 and sb.run("print('hi')").stdout == "hi\n"


@pytest.mark.skipif(importlib.util.find_spec("e2b_code_interpreter") is not None, reason="e2b installed")
def test_e2b_without_package_says_what_to_install():
    with pytest.raises(ImportError, match=r"pip install 'verl-rewards\[e2b\]'"):
        get_sandbox("e2b")
