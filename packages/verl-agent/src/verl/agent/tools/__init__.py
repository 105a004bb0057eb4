"""Tools for agent loops: upstream's `verl.tools` API (re-exported), the tool-call formats, built-ins."""

from verl.agent.tools.base import BaseTool, OpenAIFunctionToolSchema, ToolResponse, tool_text
from verl.agent.tools.formats import ToolCallFormat, tool_call_format  # noqa: E402  (after the parser it uses)
from verl.agent.tools.function_tool import (
    FUNCTION_TOOL_REGISTRY,
    FunctionTool,
    function_tool,
    get_function_tool,
    validate_arguments,
)
from verl.agent.tools.loader import load_all_tools, load_tools
from verl.agent.tools.parser import (
    FunctionCall,
    ParsedTurn,
    format_tool_call,
    parse_tool_calls,
    truncate_text,
)

__all__ = [
    "FUNCTION_TOOL_REGISTRY",
    "BaseTool",
    "FunctionCall",
    "FunctionTool",
    "OpenAIFunctionToolSchema",
    "ParsedTurn",
    "ToolCallFormat",
    "ToolResponse",
    "format_tool_call",
    "function_tool",
    "get_function_tool",
    "load_all_tools",
    "load_tools",
    "parse_tool_calls",
    "tool_call_format",
    "tool_text",
    "truncate_text",
    "validate_arguments",
]
