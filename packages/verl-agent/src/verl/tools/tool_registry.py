"""Tools from a YAML file and a function-tool file (upstream's ``verl.tools.tool_registry``).

    tools:
      - class_name: verl.agent.tools.search.SearchTool    # a dotted path, or a name in verl.registries.TOOLS
        config: {type: native, corpus_path: docs.jsonl}   # type: native (the only kind; default)
        tool_schema: {type: function, function: {...}}    # optional when the class has a default
"""

from __future__ import annotations

import importlib
from enum import Enum
from pathlib import Path
from typing import Any

import yaml
from verl.tools.base_tool import BaseTool
from verl.tools.function_tool import FunctionTool, load_function_tools_from_path
from verl.tools.schemas import OpenAIFunctionToolSchema


class ToolType(Enum):
    NATIVE = "native"


UPSTREAM_TOOL_TYPES = ("native", "mcp")  # upstream's ToolType values; mcp is not implemented here


class ToolClassNotFoundError(AttributeError):
    """A ``class_name`` whose module imports but lacks the class: an AttributeError, as upstream's
    ``getattr`` raises (its callers catch that)."""


def resolve_class(class_name: str, registry: Any, where: str = "") -> type:
    """A class from a ``package.module.Class`` path, or a short name registered in ``registry``."""
    prefix = f"{where}: " if where else ""
    if "." not in class_name:
        return registry.get(class_name)
    module_name, _, attr = class_name.rpartition(".")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ImportError(f"{prefix}cannot import module {module_name!r} for class_name {class_name!r}: {e}") from e
    if attr not in vars(module):
        raise ToolClassNotFoundError(
            f"{prefix}module {module_name!r} has no attribute {attr!r} (class_name {class_name!r})"
        )
    return vars(module)[attr]


def get_tool_class(cls_name: str) -> type:
    """A tool class from a ``package.module.Class`` path, or a short name in ``verl.registries.TOOLS``."""
    from verl.registries import TOOLS

    return resolve_class(cls_name, TOOLS)


def initialize_tools_from_config(tools_config_file: str | Path) -> list[BaseTool]:
    """Instantiate every tool listed in the YAML file; errors name the entry."""
    path = Path(tools_config_file)
    if not path.is_file():
        raise FileNotFoundError(f"tool config {path}: no such file")
    data = yaml.safe_load(path.read_text()) or {}
    entries = data.get("tools")
    if not isinstance(entries, list):
        raise ValueError(f"tool config {path}: expected a top-level 'tools:' list, got {type(entries).__name__}")
    tools: list[BaseTool] = []
    for i, entry in enumerate(entries):
        where = f"tool config {path}, tools[{i}]"
        if not isinstance(entry, dict) or "class_name" not in entry:
            raise ValueError(f"{where}: each tool needs 'class_name' (and optionally 'config', 'tool_schema')")
        config: dict[str, Any] = dict(entry.get("config") or {})
        kind = config.get("type", ToolType.NATIVE.value)
        if kind not in UPSTREAM_TOOL_TYPES:  # upstream: ToolType(kind) raises this ValueError
            raise ValueError(f"{where}: {kind!r} is not a valid ToolType; supported here: 'native'")
        if kind != ToolType.NATIVE.value:
            raise NotImplementedError(f"{where}: config.type={kind!r}; only 'native' tools are supported")
        try:
            cls = get_tool_class(str(entry["class_name"]))
        except (ImportError, AttributeError, KeyError) as e:
            raise type(e)(f"{where}: {e.args[0] if e.args else e}") from e
        schema = entry.get("tool_schema")
        try:
            schema = None if schema is None else OpenAIFunctionToolSchema.model_validate(schema)
            tools.append(cls(config=config, tool_schema=schema))
        except ValueError as e:  # pydantic's ValidationError is a ValueError
            raise ValueError(f"{where}: {e}") from e
    names = [t.name for t in tools]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ValueError(f"tool config {path}: tool names must be unique, repeated: {dupes}")
    return tools


def load_all_tools(tool_config_path: str | None, function_tool_path: str | None) -> list[BaseTool | FunctionTool]:
    """The YAML's tools plus the function file's; a name used by both is a ValueError."""
    native = initialize_tools_from_config(tool_config_path) if tool_config_path else []
    functions = load_function_tools_from_path(function_tool_path) if function_tool_path else []
    taken = {t.name for t in native}
    clash = sorted(t.name for t in functions if t.name in taken)
    if clash:
        raise ValueError(
            f"function tool name(s) {clash} from {function_tool_path!r} are also declared in {tool_config_path!r}; "
            "tool names must be unique"
        )
    return [*native, *functions]
