"""Tools from a YAML file (upstream format):

tools:
  - class_name: verl.agent.tools.search.SearchTool   # a dotted path, or a name in verl.registries.TOOLS
    config: {corpus_path: docs.jsonl, top_k: 3}
    tool_schema:                                       # optional when the class has a default
      type: function
      function: {name: search, description: ..., parameters: {...}}
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import yaml
from verl.agent.tools.base import BaseTool, OpenAIFunctionToolSchema
from verl.registries import TOOLS


def resolve_class(class_name: str, registry: Any, where: str) -> type:
    """A class from a registry name or a ``package.module.Class`` path."""
    if "." not in class_name:
        return registry.get(class_name)
    module_name, _, attr = class_name.rpartition(".")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ImportError(
            f"{where}: cannot import module {module_name!r} for class_name {class_name!r}: {e}"
        ) from e
    if not hasattr(module, attr):
        raise ImportError(f"{where}: module {module_name!r} has no {attr!r} (class_name {class_name!r})")
    return getattr(module, attr)


def load_tools(path: str | Path) -> list[BaseTool]:
    """Instantiate every tool listed in the YAML file at ``path``."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"tool config {path}: no such file")
    data = yaml.safe_load(path.read_text()) or {}
    entries = data.get("tools")
    if not isinstance(entries, list):
        raise ValueError(
            f"tool config {path}: expected a top-level 'tools:' list, got {type(entries).__name__}"
        )
    tools: list[BaseTool] = []
    for i, entry in enumerate(entries):
        where = f"tool config {path}, tools[{i}]"
        if not isinstance(entry, dict) or "class_name" not in entry:
            raise ValueError(
                f"{where}: each tool needs 'class_name' (and optionally 'config', 'tool_schema')"
            )
        cls = resolve_class(entry["class_name"], TOOLS, where)
        schema = entry.get("tool_schema") or cls.default_schema
        if schema is None:
            raise ValueError(f"{where}: {entry['class_name']} has no default schema; give 'tool_schema'")
        if isinstance(schema, dict):
            schema = OpenAIFunctionToolSchema.from_dict(schema, where=f"{where}.tool_schema")
        tools.append(cls(config=entry.get("config") or {}, tool_schema=schema))
    names = [t.name for t in tools]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ValueError(f"tool config {path}: tool names must be unique, repeated: {dupes}")
    return tools
