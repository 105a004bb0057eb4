"""Tools from YAML (`load_tools` = upstream's ``initialize_tools_from_config``) and the class lookup
the interaction loader shares."""

from __future__ import annotations

import importlib
from typing import Any

from verl.tools.tool_registry import initialize_tools_from_config, load_all_tools

load_tools = initialize_tools_from_config

__all__ = ["load_all_tools", "load_tools", "resolve_class"]


def resolve_class(class_name: str, registry: Any, where: str) -> type:
    """A class from a registry name or a ``package.module.Class`` path."""
    if "." not in class_name:
        return registry.get(class_name)
    module_name, _, attr = class_name.rpartition(".")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ImportError(f"{where}: cannot import module {module_name!r} for class_name {class_name!r}: {e}") from e
    if attr not in vars(module):
        raise ImportError(f"{where}: module {module_name!r} has no {attr!r} (class_name {class_name!r})")
    return vars(module)[attr]
