"""Function tools (upstream's ``verl.tools.function_tool``) and the argument check the loop applies.

The tool agent checks the model's arguments against the schema before calling the function: a bad
call is answered with an error text the model can learn from, never a Python exception.
"""

from __future__ import annotations

from typing import Any

from verl.tools.function_tool import (
    FUNCTION_TOOL_REGISTRY,
    FunctionTool,
    function_tool,
    get_function_tool,
    load_function_tools_from_path,
    normalize_function_tool_return,
)
from verl.tools.schemas import OpenAIFunctionToolSchema

__all__ = [
    "FUNCTION_TOOL_REGISTRY",
    "FunctionTool",
    "function_tool",
    "get_function_tool",
    "load_function_tools_from_path",
    "normalize_function_tool_return",
    "validate_arguments",
]

_TYPES = {
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "string": lambda v: isinstance(v, str),
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
    "null": lambda v: v is None,
}


def _fits(value: Any, spec: dict[str, Any]) -> bool:
    if "enum" in spec and spec["enum"] is not None and value not in spec["enum"]:
        return False
    if value is None and spec.get("nullable"):
        return True
    kinds = spec.get("type")
    kinds = [kinds] if isinstance(kinds, str) else list(kinds or [])
    if kinds and not any(_TYPES.get(k, lambda v: True)(value) for k in kinds):
        return False
    items = spec.get("items")
    if isinstance(value, list) and isinstance(items, dict):
        return all(_fits(v, items) for v in value)
    return True


def validate_arguments(schema: OpenAIFunctionToolSchema, arguments: dict[str, Any]) -> str | None:
    """An error text for the model when ``arguments`` do not fit the schema, else None."""
    fn = schema.function
    props = {k: v.model_dump(exclude_none=True) for k, v in fn.parameters.properties.items()}
    missing = [p for p in fn.parameters.required if p not in arguments]
    if missing:
        return f"missing required argument(s) {missing} for {fn.name}"
    unknown = [a for a in arguments if a not in props]
    if unknown:
        return f"unknown argument(s) {unknown} for {fn.name}; known: {sorted(props)}"
    for key, value in arguments.items():
        if not _fits(value, props[key]):
            return f"argument {key!r}={value!r} of {fn.name} should be {props[key]}"
    return None
