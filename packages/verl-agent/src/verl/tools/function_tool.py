"""Plain Python functions as tools (upstream's ``verl.tools.function_tool``).

    @function_tool                       # registered as "add"; the function itself is returned
    def add(a: int, b: int) -> str:
        \"\"\"Add two integers.

        Args:
            a: the first number
            b: the second number
        \"\"\"
        return str(a + b)

The schema comes from the signature and the Google-style docstring (transformers'
``get_json_schema``: every parameter needs a type hint and an ``Args:`` line, else registration
fails). Tools land in `FUNCTION_TOOL_REGISTRY`; ``rollout.multi_turn.function_tool_path`` names a
Python file whose decorated functions the tool agent offers (`load_function_tools_from_path`).
A function returns a str, a dict (sent as JSON), a `ToolResponse`, or ``(response, reward[, metrics])``.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib.util
import inspect
import json
import logging
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse

logger = logging.getLogger(__name__)

FUNCTION_TOOL_REGISTRY: dict[str, FunctionTool] = {}
_LOADED_PATHS: dict[str, list[FunctionTool]] = {}


@dataclass
class FunctionTool:
    """A registered function: its tool ``name``, the callable and the schema shown to the model."""

    name: str
    fn: Callable[..., Any]
    tool_schema: OpenAIFunctionToolSchema
    is_async: bool = False

    async def call(self, parameters: dict[str, Any]) -> Any:
        """Call the function with the model's arguments (a sync function runs in a thread, so a slow
        one does not stall the other trajectories on the event loop)."""
        if self.is_async:
            return await self.fn(**parameters)
        return await asyncio.to_thread(self.fn, **parameters)


def _schema_of(fn: Callable, tool_name: str) -> OpenAIFunctionToolSchema:
    from transformers.utils import get_json_schema

    variadic = [
        n for n, p in inspect.signature(fn).parameters.items() if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    if variadic:
        raise ValueError(
            f"@function_tool {tool_name!r} ({fn.__module__}.{fn.__qualname__}) has variadic parameter(s) "
            f"{variadic}, which a JSON schema cannot describe; name each parameter"
        )
    raw = get_json_schema(fn)
    raw["function"]["name"] = tool_name
    raw["function"].pop("return", None)  # not part of the OpenAI tool schema
    return OpenAIFunctionToolSchema.model_validate(raw)


def function_tool(name: str | Callable | None = None, *, schema: OpenAIFunctionToolSchema | dict | None = None):
    """Register a function as a tool: ``@function_tool``, ``@function_tool("other_name")`` or
    ``@function_tool(schema={...})`` (skip inference). Returns the function unchanged. Registering
    a different function under a taken name is a ValueError."""

    def register(fn: Callable, tool_name: str | None) -> Callable:
        tool_name = tool_name or fn.__name__
        if isinstance(schema, OpenAIFunctionToolSchema):
            built = schema
        elif isinstance(schema, dict):
            built = OpenAIFunctionToolSchema.model_validate(schema)
        else:
            built = _schema_of(fn, tool_name)
        existing = FUNCTION_TOOL_REGISTRY.get(tool_name)
        if existing is not None and existing.fn is not fn:
            raise ValueError(
                f"function tool {tool_name!r} is already registered to "
                f"{existing.fn.__module__}.{existing.fn.__qualname__}; refusing to replace it with "
                f"{fn.__module__}.{fn.__qualname__}"
            )
        FUNCTION_TOOL_REGISTRY[tool_name] = FunctionTool(tool_name, fn, built, inspect.iscoroutinefunction(fn))
        return fn

    if callable(name):
        return register(name, None)
    return lambda fn: register(fn, name)


def get_function_tool(name: str) -> FunctionTool:
    if name not in FUNCTION_TOOL_REGISTRY:
        raise KeyError(
            f"function tool {name!r} is not registered (known: {sorted(FUNCTION_TOOL_REGISTRY)}); name the file "
            "defining it in actor_rollout_ref.rollout.multi_turn.function_tool_path"
        )
    return FUNCTION_TOOL_REGISTRY[name]


def load_function_tools_from_path(path: str) -> list[FunctionTool]:
    """Run the Python file at ``path`` (once per process) and return the tools it registered."""
    abs_path = os.path.abspath(os.path.expanduser(path))
    if not os.path.isfile(abs_path):
        raise FileNotFoundError(f"function_tool_path {path!r}: no such file")
    if abs_path in _LOADED_PATHS:
        return _LOADED_PATHS[abs_path]
    before = set(FUNCTION_TOOL_REGISTRY)
    module_name = "verl_function_tools_" + hashlib.sha1(abs_path.encode()).hexdigest()[:12]
    spec = importlib.util.spec_from_file_location(module_name, abs_path)
    if spec is None or spec.loader is None:
        raise ImportError(f"function_tool_path {path!r} cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    tools = [FUNCTION_TOOL_REGISTRY[n] for n in sorted(set(FUNCTION_TOOL_REGISTRY) - before)]
    if not tools:
        logger.warning("function_tool_path %s defines no @function_tool functions", path)
    _LOADED_PATHS[abs_path] = tools
    return tools


def _response(value: Any) -> ToolResponse:
    if isinstance(value, ToolResponse):
        return value
    if isinstance(value, dict):
        return ToolResponse(text=json.dumps(value, ensure_ascii=False))
    return ToolResponse(text=value if isinstance(value, str) else str(value))


def normalize_function_tool_return(ret: Any) -> tuple[ToolResponse, float, dict]:
    """A function's return value as ``(ToolResponse, reward, metrics)``: a ToolResponse, str or dict
    alone (reward 0), or a tuple ``(response,)``, ``(response, reward)``, ``(response, reward,
    metrics)`` where None means 0 / {}. Other tuple lengths are a TypeError (an authoring bug)."""
    if isinstance(ret, tuple):
        if not 1 <= len(ret) <= 3:
            raise TypeError(
                f"a function tool returned a tuple of length {len(ret)} ({ret!r}); return (response,), "
                "(response, reward) or (response, reward, metrics)"
            )
        reward = 0.0 if len(ret) < 2 or ret[1] is None else float(ret[1])
        metrics = {} if len(ret) < 3 or ret[2] is None else dict(ret[2])
        return _response(ret[0]), reward, metrics
    return _response(ret), 0.0, {}
