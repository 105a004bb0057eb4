"""ReTool's ``code_interpreter``: verl-agent's sandboxed code interpreter with upstream ReTool's input handling.

The model calls it in the Hermes format the tool agent parses,
``<tool_call>{"name": "code_interpreter", "arguments": {"code": "..."}}</tool_call>``; the code runs in a
verl-rewards sandbox (``local`` by default: a contained subprocess on this machine; ``sandbox_fusion``
with ``sandbox_fusion_url``: a SandboxFusion server, as upstream runs it). What ReTool adds to the plain
interpreter (upstream's ``CustomSandboxFusionTool``):

- a fenced block (```` ```python ... ``` ````) inside ``code`` is unwrapped to its first block;
- a final bare expression is printed (models write ``x * y`` and expect to see the value, as in a
  notebook); upstream wraps the last line in ``print(...)``, here only when it parses as an expression.

What the tool agent does around it (``actor_rollout_ref.rollout.multi_turn.*``): the output shown to the
model is cut to ``max_tool_response_length`` characters with a ``...(truncated)...`` marker, at most
``max_parallel_calls`` calls run per turn and ``max_assistant_turns`` bounds the calls per trajectory, a
run that times out comes back as ``[timeout]`` text, and a tool that raises comes back as an
``Error: tool 'code_interpreter' failed: ...`` text: the rollout goes on, the model sees what went wrong.

Config keys (upstream's names where upstream has them): ``sandbox`` (``local`` | ``sandbox_fusion``;
default ``sandbox_fusion`` when ``sandbox_fusion_url`` is set, else ``local``), ``sandbox_fusion_url``,
``default_timeout`` (s, 10), ``memory_limit_mb`` (1024), ``default_language`` (``python`` only),
``rate_limit`` (runs in flight from one process), ``type`` (``native``). Any other key is an error.
"""

from __future__ import annotations

import ast
import re
from typing import Any

from verl.agent.tools.code_interpreter import CodeInterpreterTool

_FENCE_RE = re.compile(r"```(?:python|py)?\s*\n?(.*?)```", re.S)
KNOWN_KEYS = {
    "type",
    "sandbox",
    "sandbox_fusion_url",
    "default_timeout",
    "memory_limit_mb",
    "default_language",
    "rate_limit",
}


def prepare_code(code: str) -> str:
    """The program to run for ``code``: the first fenced block's body when there is one, and a final bare
    expression (not already a ``print``) wrapped in ``print(...)``. Code that does not parse is returned
    as it is (the interpreter reports the syntax error to the model)."""
    match = _FENCE_RE.search(code)
    if match:
        code = match.group(1)
    code = code.strip("\n")
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return code
    if not tree.body or not isinstance(tree.body[-1], ast.Expr):
        return code
    last = tree.body[-1]
    call = last.value
    if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "print":
        return code
    lines = code.split("\n")
    # The expression may share its first line with earlier statements (`a = 1; a * 2`) and its last line
    # with a comment; ast's offsets are in UTF-8 bytes.
    prefix = lines[last.lineno - 1].encode()[: last.col_offset].decode()
    suffix = lines[last.end_lineno - 1].encode()[last.end_col_offset :].decode()
    expr = ast.get_source_segment(code, last)
    body = f"{prefix}print({expr}){suffix}"
    return "\n".join([*lines[: last.lineno - 1], body, *lines[last.end_lineno :]]).rstrip("\n")


class ReToolCodeInterpreter(CodeInterpreterTool):
    """``code_interpreter`` as ReTool uses it (module doc). Tool configs name it by its dotted path,
    ``verl_recipe_retool.tools.ReToolCodeInterpreter``."""

    def __init__(self, config: dict[str, Any] | None = None, tool_schema: Any = None):
        config = dict(config or {})
        unknown = sorted(set(config) - KNOWN_KEYS)
        if unknown:
            raise ValueError(
                f"code_interpreter: unknown config key(s) {unknown}; known: {sorted(KNOWN_KEYS)}"
            )
        language = config.get("default_language", "python")
        if language != "python":
            raise ValueError(f"code_interpreter: default_language={language!r}; only 'python' is supported")
        url = config.get("sandbox_fusion_url")
        sandbox = config.get("sandbox", "sandbox_fusion" if url else "local")
        if sandbox not in ("local", "sandbox_fusion"):
            raise ValueError(f"code_interpreter: sandbox={sandbox!r}; known: local, sandbox_fusion")
        if sandbox == "sandbox_fusion" and not url:
            raise ValueError(
                "code_interpreter: sandbox=sandbox_fusion needs sandbox_fusion_url (http://host:8080/run_code)"
            )
        if sandbox == "local" and url:
            raise ValueError(
                "code_interpreter: sandbox_fusion_url is set but sandbox=local; drop one of them"
            )
        timeout = float(config.get("default_timeout", 10.0))
        memory = int(config.get("memory_limit_mb", 1024))
        sandbox_kwargs: dict[str, Any] = {"timeout": timeout, "memory_mb": memory}
        if url:
            sandbox_kwargs["url"] = url
        if "rate_limit" in config:
            sandbox_kwargs["max_concurrent"] = int(config["rate_limit"])
        # The base class reads these three keys and builds the sandbox from them.
        super().__init__(
            {"sandbox": sandbox, "sandbox_kwargs": sandbox_kwargs, "timeout": timeout, "memory_mb": memory},
            tool_schema,
        )

    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs: Any):
        code = parameters.get("code")
        if isinstance(code, str) and code.strip():
            parameters = {**parameters, "code": prepare_code(code)}
        return await super().execute(instance_id, parameters, **kwargs)
