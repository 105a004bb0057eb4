"""Client of a SandboxFusion server (https://github.com/bytedance/SandboxFusion): ``POST {url}/run_code``.

Request: ``{"code", "language", "stdin", "run_timeout", "memory_limit_MB"}``. Response:
``{"status": "Success"|"Failed"|"SandboxError", "message", "run_result": {"status":
"Finished"|"TimeLimitExceeded"|"Error", "return_code", "stdout", "stderr", "execution_time"}, ...}``.
"""

from __future__ import annotations

import threading
import time

import requests
from verl.rewards.sandbox import base
from verl.rewards.sandbox.base import RunResult, Sandbox


class SandboxFusionSandbox(Sandbox):
    """Args: url (server root or the full ``.../run_code`` address), timeout, memory_mb,
    max_concurrent (requests in flight from this process), retries (on connection errors / SandboxError)."""

    def __init__(
        self,
        url: str | None = None,
        timeout: float = 10.0,
        memory_mb: int = 1024,
        max_concurrent: int = 8,
        retries: int = 2,
    ):
        if not url:
            raise ValueError("sandbox 'sandbox_fusion' needs reward.sandbox.url (e.g. http://host:8080)")
        self.url = url if url.rstrip("/").endswith("/run_code") else url.rstrip("/") + "/run_code"
        self.timeout = float(timeout)
        self.memory_mb = int(memory_mb)
        self.retries = int(retries)
        self._slots = threading.BoundedSemaphore(max_concurrent)

    def run(self, code, stdin="", *, language="python", timeout=None, memory_mb=None) -> RunResult:
        timeout = timeout or self.timeout
        payload = {
            "code": code,
            "language": language,
            "stdin": stdin,
            "run_timeout": timeout,
            "memory_limit_MB": memory_mb or self.memory_mb,
        }
        start = time.monotonic()
        last = ""
        with self._slots:
            for attempt in range(self.retries + 1):
                try:
                    resp = requests.post(self.url, json=payload, timeout=timeout + 30)
                    if 400 <= resp.status_code < 500:  # the request itself is wrong: retrying cannot help
                        return RunResult(
                            base.SANDBOX_ERROR,
                            notes=[f"{self.url} refused the request ({resp.status_code}): {resp.text[:500]}"],
                            wall_time=time.monotonic() - start,
                            isolation="sandbox_fusion",
                        )
                    resp.raise_for_status()
                    body = resp.json()
                except (requests.RequestException, ValueError) as e:
                    last = f"request to {self.url} failed: {e}"
                    time.sleep(0.2 * (attempt + 1))
                    continue
                if body.get("status") == "SandboxError":
                    last = f"SandboxFusion reported SandboxError: {body.get('message', '')}"
                    continue
                return _to_result(body, time.monotonic() - start)
        return RunResult(
            base.SANDBOX_ERROR, notes=[last], wall_time=time.monotonic() - start, isolation="sandbox_fusion"
        )


def _to_result(body: dict, wall: float) -> RunResult:
    compile_result = body.get("compile_result") or {}
    run = body.get("run_result") or {}
    if (
        compile_result
        and compile_result.get("status") not in (None, "Finished")
        or (compile_result and compile_result.get("return_code") not in (None, 0))
    ):
        return RunResult(
            base.ERROR,
            exit_code=compile_result.get("return_code"),
            stderr=compile_result.get("stderr") or "",
            notes=["compilation failed"],
            wall_time=wall,
            isolation="sandbox_fusion",
        )
    status = run.get("status")
    rc = run.get("return_code")
    res = RunResult(
        base.OK,
        exit_code=rc,
        stdout=run.get("stdout") or "",
        stderr=run.get("stderr") or "",
        wall_time=wall,
        isolation="sandbox_fusion",
    )
    if status == "TimeLimitExceeded":
        res.status = base.TIMEOUT
        res.notes.append("time limit exceeded (reported by SandboxFusion)")
    elif "MemoryError" in res.stderr[-4000:]:
        res.status = base.MEMORY
    elif status != "Finished" or rc not in (0, None):
        res.status = base.ERROR
    return res
