"""Tools: the `BaseTool` interface, ``@function_tool``, the YAML loader, the Hermes parser, built-ins."""

from verl.agent.tools.base import BaseTool, OpenAIFunctionToolSchema
from verl.agent.tools.function_tool import FunctionTool, function_tool
from verl.agent.tools.loader import load_tools
from verl.agent.tools.parser import (
    FunctionCall,
    ParsedTurn,
    format_tool_call,
    parse_tool_calls,
    truncate_text,
)

__all__ = [
    "BaseTool",
    "FunctionCall",
    "FunctionTool",
    "OpenAIFunctionToolSchema",
    "ParsedTurn",
    "format_tool_call",
    "function_tool",
    "load_tools",
    "parse_tool_calls",
    "truncate_text",
]
