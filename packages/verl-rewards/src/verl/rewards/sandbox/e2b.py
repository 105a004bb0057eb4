"""E2B cloud sandboxes through ``e2b-code-interpreter`` (``pip install verl-rewards[e2b]``).

Each run creates a fresh sandbox (``Sandbox(template=..., timeout=..., api_key=...,
request_timeout=...)`` as a context manager) and sends one driver program to its kernel with
``run_code(driver, timeout=...)``. The driver runs the program in a child Python process with the
run's limits, since E2B's kernel has neither stdin nor per-run limits: stdin is piped in, the wall
clock is the child's timeout, ``memory_mb`` is the child's address-space limit (``RLIMIT_AS``, as
the local sandbox sets it). The driver prints the child's stdout / stderr and evaluates to a JSON
status (a dict ``{"rc", "timeout"}``; the kernel returns its repr as the execution's text result).

Options: ``timeout`` (default per-run wall clock, s), ``memory_mb`` (default address-space limit,
MiB), ``template`` (E2B template id; None = E2B's default), ``api_key`` (else ``E2B_API_KEY``),
``request_timeout`` (HTTP, s), ``max_concurrent`` (sandboxes alive at once from this process). Any
other option is refused. The package is imported when this sandbox is constructed, never before.
"""

from __future__ import annotations

import ast
import threading
import time

from verl.rewards.sandbox import base
from verl.rewards.sandbox.base import RunResult, Sandbox

# Seconds the E2B sandbox outlives the run's own wall clock (start-up, result transfer).
_LIFETIME_MARGIN = 30

_DRIVER = """
import resource as _resource, subprocess as _subprocess, sys as _sys
def _limit():
    if {memory_bytes}:
        _resource.setrlimit(_resource.RLIMIT_AS, ({memory_bytes}, {memory_bytes}))
try:
    _p = _subprocess.run([_sys.executable, "-c", {code!r}], input={stdin!r}, capture_output=True, text=True,
                         timeout={timeout!r}, preexec_fn=_limit)
    _sys.stdout.write(_p.stdout); _sys.stderr.write(_p.stderr)
    _status = {{"rc": _p.returncode, "timeout": False}}
except _subprocess.TimeoutExpired as _e:
    _sys.stdout.write(_e.stdout.decode() if isinstance(_e.stdout, bytes) else (_e.stdout or ""))
    _status = {{"rc": None, "timeout": True}}
_status
"""


def driver_program(code: str, stdin: str, timeout: float, memory_mb: int | None) -> str:
    """The program sent to E2B's kernel for one run (see module doc)."""
    memory_bytes = int(memory_mb) << 20 if memory_mb else 0
    return _DRIVER.format(code=code, stdin=stdin, timeout=float(timeout), memory_bytes=memory_bytes)


class E2BSandbox(Sandbox):
    def __init__(
        self,
        timeout: float = 10.0,
        memory_mb: int | None = 1024,
        template: str | None = None,
        api_key: str | None = None,
        request_timeout: float | None = None,
        max_concurrent: int = 8,
    ):
        try:
            from e2b_code_interpreter import Sandbox as _E2B
        except ImportError as e:
            raise ImportError(
                "sandbox 'e2b' needs the e2b-code-interpreter package: pip install 'verl-rewards[e2b]' "
                "(or choose reward.sandbox.name=local)"
            ) from e
        if memory_mb is not None and int(memory_mb) <= 0:
            raise ValueError(f"e2b sandbox: memory_mb must be a positive number of MiB or None, got {memory_mb!r}")
        self._cls = _E2B
        self.timeout = float(timeout)
        self.memory_mb = None if memory_mb is None else int(memory_mb)
        self.template = template
        self.api_key = api_key
        self.request_timeout = request_timeout
        self._slots = threading.BoundedSemaphore(int(max_concurrent))

    def _sandbox_kwargs(self, timeout: float) -> dict:
        kwargs: dict = {"timeout": int(timeout) + _LIFETIME_MARGIN}
        for key, value in (("template", self.template), ("api_key", self.api_key),
                           ("request_timeout", self.request_timeout)):  # fmt: skip
            if value is not None:
                kwargs[key] = value
        return kwargs

    def run(self, code, stdin="", *, language="python", timeout=None, memory_mb=None) -> RunResult:
        if language != "python":
            raise ValueError(f"the e2b sandbox here runs language 'python' only, got {language!r}")
        timeout = float(timeout or self.timeout)
        memory_mb = memory_mb or self.memory_mb
        driver = driver_program(code, stdin, timeout, memory_mb)
        start = time.monotonic()
        try:
            with self._slots, self._cls(**self._sandbox_kwargs(timeout)) as sbx:
                ex = sbx.run_code(driver, timeout=timeout + _LIFETIME_MARGIN)
        except Exception as e:  # noqa: BLE001 - remote failures are the sandbox's, reported not raised
            status = base.TIMEOUT if "timeout" in str(e).lower() else base.SANDBOX_ERROR
            return RunResult(status, notes=[f"e2b: {type(e).__name__}: {e}"], wall_time=time.monotonic() - start,
                             isolation="e2b")  # fmt: skip
        wall = time.monotonic() - start
        stdout, stderr = "".join(ex.logs.stdout), "".join(ex.logs.stderr)
        if ex.error is not None:  # the driver itself failed: not the program's doing
            return RunResult(base.SANDBOX_ERROR, stdout=stdout, stderr=stderr, wall_time=wall, isolation="e2b",
                             notes=[f"e2b driver failed: {ex.error.name}: {ex.error.value}"])  # fmt: skip
        status = ast.literal_eval(ex.text)
        res = RunResult(base.OK, exit_code=status["rc"], stdout=stdout, stderr=stderr, wall_time=wall,
                        isolation="e2b")  # fmt: skip
        if status["timeout"]:
            res.status = base.TIMEOUT
            res.notes.append(f"wall-clock limit of {timeout:g} s reached")
        elif "MemoryError" in stderr[-4000:]:
            res.status = base.MEMORY
            res.notes.append("memory limit reached (allocation refused)")
        elif res.exit_code != 0:
            res.status = base.ERROR
        return res
