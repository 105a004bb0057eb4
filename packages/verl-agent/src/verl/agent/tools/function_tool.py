"""Tools from typed Python functions: ``@function_tool`` builds the schema from the signature.

    @function_tool
    def add(a: int, b: int) -> str:
        \"\"\"Add two integers.

        Args:
            a: the first number
            b: the second number
        \"\"\"
        return str(a + b)

gives a `BaseTool` named ``add`` whose schema says ``a`` and ``b`` are required integers with those
descriptions. Arguments are checked against the types before the call; a bad call returns an error
text for the model instead of raising. ``async def`` functions are awaited.
"""

from __future__ import annotations

import inspect
import re
import types
import typing
from collections.abc import Callable
from typing import Any

from verl.agent.tools.base import BaseTool, OpenAIFunctionToolSchema

_JSON_TYPES = {int: "integer", float: "number", str: "string", bool: "boolean", dict: "object", list: "array"}


def _json_schema(tp: Any, where: str) -> dict[str, Any]:
    origin = typing.get_origin(tp)
    if tp in _JSON_TYPES:
        return {"type": _JSON_TYPES[tp]}
    if origin is typing.Literal:
        values = list(typing.get_args(tp))
        return {"type": _JSON_TYPES[type(values[0])], "enum": values}
    if origin in (list, tuple):
        args = typing.get_args(tp)
        return {"type": "array", **({"items": _json_schema(args[0], where)} if args else {})}
    if origin is dict:
        return {"type": "object"}
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return _json_schema(args[0], where)
    raise TypeError(
        f"{where}: cannot express type {tp!r} as a JSON schema; use int, float, str, bool, list[...], "
        "dict, Literal[...] or Optional of those"
    )


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """(description, {param: description}) from a Google-style docstring (``Args:`` section)."""
    if not doc:
        return "", {}
    doc = inspect.cleandoc(doc)
    parts = re.split(r"^\s*(?:Args|Arguments|Parameters):\s*$", doc, maxsplit=1, flags=re.M)
    description = " ".join(parts[0].split("\n\n")[0].split())
    params: dict[str, str] = {}
    if len(parts) == 2:
        current = None
        for line in parts[1].splitlines():
            if re.match(r"^\S.*:\s*$", line):  # the next section (Returns:, Raises:) ends Args
                break
            m = re.match(r"^\s*(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$", line)
            if m:
                current = m.group(1)
                params[current] = m.group(2).strip()
            elif current and line.strip():
                params[current] += " " + line.strip()
    return description, params


def schema_from_function(fn: Callable, name: str | None = None) -> OpenAIFunctionToolSchema:
    """The OpenAI function schema of ``fn`` (every parameter must be annotated)."""
    where = f"tool function {fn.__qualname__}"
    hints = typing.get_type_hints(fn)
    description, docs = parse_docstring(fn.__doc__)
    props: dict[str, Any] = {}
    required: list[str] = []
    for pname, p in inspect.signature(fn).parameters.items():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        if pname not in hints:
            raise TypeError(f"{where}: parameter {pname!r} needs a type annotation")
        prop = _json_schema(hints[pname], f"{where}, parameter {pname!r}")
        if pname in docs:
            prop["description"] = docs[pname]
        props[pname] = prop
        if p.default is inspect.Parameter.empty:
            required.append(pname)
    return OpenAIFunctionToolSchema(
        name=name or fn.__name__,
        description=description,
        parameters={"type": "object", "properties": props, "required": required},
    )


def _check(value: Any, schema: dict[str, Any]) -> bool:
    kind = schema.get("type")
    if "enum" in schema and value not in schema["enum"]:
        return False
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "string":
        return isinstance(value, str)
    if kind == "array":
        return isinstance(value, list) and all(_check(v, schema.get("items", {})) for v in value)
    if kind == "object":
        return isinstance(value, dict)
    return True


def validate_arguments(schema: OpenAIFunctionToolSchema, arguments: dict[str, Any]) -> str | None:
    """An error text for the model when ``arguments`` do not fit the schema, else None."""
    props = schema.parameters.get("properties", {})
    missing = [p for p in schema.parameters.get("required", []) if p not in arguments]
    if missing:
        return f"missing required argument(s) {missing} for {schema.name}"
    unknown = [a for a in arguments if a not in props]
    if unknown:
        return f"unknown argument(s) {unknown} for {schema.name}; known: {sorted(props)}"
    for key, value in arguments.items():
        if not _check(value, props[key]):
            return f"argument {key!r}={value!r} of {schema.name} should be {props[key]}"
    return None


class FunctionTool(BaseTool):
    """A `BaseTool` that calls a Python function with the (validated) arguments."""

    def __init__(self, fn: Callable, name: str | None = None, config: dict[str, Any] | None = None):
        super().__init__(config, schema_from_function(fn, name))
        self.fn = fn

    async def execute(
        self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
    ) -> tuple[str, float, dict[str, Any]]:
        error = validate_arguments(self.tool_schema, parameters)
        if error:
            return f"Error: {error}", 0.0, {"tool_error": 1.0}
        result = self.fn(**parameters)
        if inspect.isawaitable(result):
            result = await result
        return str(result), 0.0, {}


def function_tool(fn: Callable | None = None, *, name: str | None = None) -> Any:
    """Decorator: ``@function_tool`` or ``@function_tool(name="calc")`` -> a `FunctionTool`."""
    if fn is None:
        return lambda f: FunctionTool(f, name=name)
    return FunctionTool(fn, name=name)
