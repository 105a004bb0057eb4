"""Hermes / Qwen tool-call format: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` (the
``hermes`` entry of `verl.agent.tools.formats`, which holds the other formats).

`parse_tool_calls` never raises on model output: every malformed call becomes an error text that the
loop sends back to the model as the tool's answer, so the model can learn to call correctly.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

TOOL_CALL_START = "<tool_call>"
TOOL_CALL_END = "</tool_call>"
_CALL_RE = re.compile(re.escape(TOOL_CALL_START) + r"(.*?)" + re.escape(TOOL_CALL_END), re.S)


@dataclass
class FunctionCall:
    name: str
    arguments: dict[str, Any]


@dataclass
class ParsedTurn:
    """One assistant turn: the text outside tool calls, the well-formed calls, and errors for the
    malformed ones (in order of appearance)."""

    content: str
    calls: list[FunctionCall] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def has_tool_call(self) -> bool:
        return bool(self.calls or self.errors)


def _short(text: str, limit: int = 200) -> str:
    text = text.strip()
    return repr(text if len(text) <= limit else text[:limit] + "...")


def _parse_one(body: str) -> FunctionCall | str:
    try:
        data = json.loads(body)
    except json.JSONDecodeError as e:
        return f"Error: the tool call {_short(body)} is not valid JSON ({e.msg} at char {e.pos})"
    if not isinstance(data, dict) or not isinstance(data.get("name"), str):
        return f'Error: a tool call must be a JSON object with a "name" string, got {_short(body)}'
    return parse_arguments(data["name"], data.get("arguments", {}))


def parse_arguments(name: str, args: Any) -> FunctionCall | str:
    """A call of ``name`` with ``args`` (a JSON object, or its JSON text: some models emit a string), or
    the error text for the model when they are not a JSON object."""
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError:
            return f"Error: the arguments of tool call {name!r} are not valid JSON: {_short(args)}"
    if not isinstance(args, dict):
        return f'Error: "arguments" of tool call {name!r} must be a JSON object, got {args!r}'
    return FunctionCall(name, args)


def parse_tool_calls(text: str) -> ParsedTurn:
    """Split an assistant turn into content and tool calls (see module doc)."""
    turn = ParsedTurn(content=_CALL_RE.sub("", text))
    for body in _CALL_RE.findall(text):
        parsed = _parse_one(body)
        if isinstance(parsed, str):
            turn.errors.append(parsed)
        else:
            turn.calls.append(parsed)
    rest = turn.content
    if TOOL_CALL_START in rest:
        turn.errors.append(f"Error: a {TOOL_CALL_START} was opened but never closed with {TOOL_CALL_END}")
        rest = rest.split(TOOL_CALL_START, 1)[0]
    turn.content = rest.strip()
    return turn


def format_tool_call(name: str, arguments: dict[str, Any]) -> str:
    """The text a model writes to call ``name`` (used by tests and the chat endpoint)."""
    return f"{TOOL_CALL_START}{json.dumps({'name': name, 'arguments': arguments})}{TOOL_CALL_END}"


def truncate_text(text: str, max_length: int, side: str = "middle") -> str:
    """Cut a tool response to ``max_length`` characters, keeping the ``left``, ``right`` or both
    ends (``middle``), with a marker where text was removed."""
    if len(text) <= max_length:
        return text
    if side == "left":
        return text[:max_length] + "...(truncated)"
    if side == "right":
        return "(truncated)..." + text[-max_length:]
    if side == "middle":
        half = max_length // 2
        return text[:half] + "...(truncated)..." + text[len(text) - (max_length - half) :]
    raise ValueError(f"tool_response_truncate_side {side!r}; known: left, right, middle")
