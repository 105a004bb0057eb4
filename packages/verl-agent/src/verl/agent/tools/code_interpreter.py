"""A Python code interpreter tool that runs code in a verl-rewards sandbox (``local`` by default).

Config keys: ``sandbox`` (name in verl-rewards' ``SANDBOXES``, default ``local``), ``sandbox_kwargs``,
``timeout`` (seconds, default 5), ``memory_mb`` (default 512). The model sees stdout, and stderr plus
the status when the run failed.
"""

from __future__ import annotations

import asyncio
from typing import Any

from verl.agent.tools.base import BaseTool, ToolResponse
from verl.registries import TOOLS


@TOOLS.register("code_interpreter")
class CodeInterpreterTool(BaseTool):
    default_schema = {
        "type": "function",
        "function": {
            "name": "code_interpreter",
            "description": "Run Python code and return what it prints.",
            "parameters": {
                "type": "object",
                "properties": {"code": {"type": "string", "description": "the Python program to run"}},
                "required": ["code"],
            },
        },
    }

    def __init__(self, config: dict[str, Any] | None = None, tool_schema: Any = None):
        super().__init__(config, tool_schema)
        from verl.rewards.sandbox import get_sandbox

        self.sandbox = get_sandbox(
            self.config.get("sandbox", "local"), **dict(self.config.get("sandbox_kwargs", {}))
        )
        self.timeout = float(self.config.get("timeout", 5.0))
        self.memory_mb = int(self.config.get("memory_mb", 512))

    async def execute(
        self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
    ) -> tuple[ToolResponse, float, dict[str, Any]]:
        code = parameters.get("code")
        if not isinstance(code, str) or not code.strip():
            return (
                ToolResponse(text="Error: code_interpreter needs a non-empty string argument 'code'"),
                0.0,
                {"tool_error": 1.0},
            )
        # The sandbox blocks on a subprocess: run it off the event loop so other trajectories proceed.
        result = await asyncio.to_thread(
            self.sandbox.run, code, "", language="python", timeout=self.timeout, memory_mb=self.memory_mb
        )
        text = result.stdout
        if not result.ok:
            text += (
                f"\n[{result.status}] {result.stderr.strip()}"
                if result.stderr.strip()
                else f"\n[{result.status}]"
            )
        metrics = {"ok": float(result.ok), "wall_time": result.wall_time}
        return ToolResponse(text=text.strip() or "(no output)"), 0.0, metrics
