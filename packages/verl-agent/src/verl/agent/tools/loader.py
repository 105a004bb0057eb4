"""Tools from YAML (`load_tools` = upstream's ``initialize_tools_from_config``) and the class lookup
the interaction and agent-loop loaders share (`resolve_class`, from ``verl.tools``)."""

from __future__ import annotations

from verl.tools.tool_registry import initialize_tools_from_config, load_all_tools, resolve_class

load_tools = initialize_tools_from_config

__all__ = ["load_all_tools", "load_tools", "resolve_class"]
