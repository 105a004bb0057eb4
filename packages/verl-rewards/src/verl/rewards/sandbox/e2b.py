"""E2B cloud sandboxes through ``e2b-code-interpreter`` (``pip install verl-rewards[e2b]``).

The package is imported when this sandbox is constructed, never before. E2B's ``run_code`` has no
stdin, so stdin is fed by replacing ``sys.stdin`` in a prelude. Needs ``E2B_API_KEY`` (or ``api_key``).
"""

from __future__ import annotations

import time

from verl.rewards.sandbox import base
from verl.rewards.sandbox.base import RunResult, Sandbox


class E2BSandbox(Sandbox):
    def __init__(self, timeout: float = 10.0, api_key: str | None = None, **_: object):
        try:
            from e2b_code_interpreter import Sandbox as _E2B
        except ImportError as e:
            raise ImportError(
                "sandbox 'e2b' needs the e2b-code-interpreter package: pip install 'verl-rewards[e2b]' "
                "(or choose reward.sandbox.name=local)"
            ) from e
        self._cls = _E2B
        self.timeout = float(timeout)
        self.api_key = api_key

    def run(self, code, stdin="", *, language="python", timeout=None, memory_mb=None) -> RunResult:
        if language != "python":
            raise ValueError(f"the e2b sandbox here runs language 'python' only, got {language!r}")
        timeout = timeout or self.timeout
        prelude = f"import io as _io, sys as _sys\n_sys.stdin = _io.StringIO({stdin!r})\n"
        start = time.monotonic()
        kwargs = {"api_key": self.api_key} if self.api_key else {}
        try:
            with self._cls(**kwargs) as sbx:
                ex = sbx.run_code(prelude + code, timeout=timeout)
        except Exception as e:  # noqa: BLE001 - remote failures are the sandbox's, reported not raised
            status = base.TIMEOUT if "timeout" in str(e).lower() else base.SANDBOX_ERROR
            return RunResult(status, notes=[f"e2b: {e}"], wall_time=time.monotonic() - start, isolation="e2b")
        res = RunResult(
            base.OK,
            exit_code=0,
            stdout="".join(ex.logs.stdout),
            stderr="".join(ex.logs.stderr),
            wall_time=time.monotonic() - start,
            isolation="e2b",
        )
        if ex.error is not None:
            res.exit_code = 1
            res.stderr += f"\n{ex.error.name}: {ex.error.value}\n{ex.error.traceback}"
            res.status = base.MEMORY if ex.error.name == "MemoryError" else base.ERROR
        return res
