"""Tool-call formats: how a model writes a tool call in its turn, chosen by
``actor_rollout_ref.rollout.multi_turn.format`` (upstream's names; ``verl.registries.TOOL_CALL_FORMATS``).

- ``hermes`` (Hermes / Qwen): ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``
  (`verl.agent.tools.parser`).
- ``gpt-oss`` (OpenAI's Harmony format): a call is a message on the ``commentary`` channel addressed to
  ``functions.<name>``, JSON-constrained and ended by ``<|call|>``::

      <|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "SF"}<|call|>

  (the leading ``<|start|>assistant`` is absent when the prompt already holds it, and the
  ``<|constrain|>json`` marker is optional). Reasoning on the ``analysis`` channel
  (``<|channel|>analysis<|message|>...<|end|>``) is not searched for calls, as upstream's parser drops it.
  The text is read with the special tokens kept (`verl.agent.tokenization.ChatTokens.decode`).

Every format parses without raising: a malformed call becomes an error text in `ParsedTurn.errors`,
which the tool loop sends back as the tool's answer.
"""

from __future__ import annotations

import json
import re
from typing import Any

from verl.agent.tools.parser import (
    TOOL_CALL_END,
    ParsedTurn,
    format_tool_call,
    parse_arguments,
    parse_tool_calls,
)
from verl.registries import TOOL_CALL_FORMATS

__all__ = ["GptOssFormat", "HermesFormat", "ToolCallFormat", "tool_call_format"]


class ToolCallFormat:
    """One format: ``parse`` an assistant turn, ``format_call`` (what a model writes to call a tool) and
    ``call_end`` (the text that ends a call: a tool's answer follows it)."""

    name = ""
    call_end = ""

    def parse(self, text: str) -> ParsedTurn:
        raise NotImplementedError

    def format_call(self, name: str, arguments: dict[str, Any]) -> str:
        raise NotImplementedError


@TOOL_CALL_FORMATS.register("hermes")
class HermesFormat(ToolCallFormat):
    name = "hermes"
    call_end = TOOL_CALL_END

    def parse(self, text: str) -> ParsedTurn:
        return parse_tool_calls(text)

    def format_call(self, name: str, arguments: dict[str, Any]) -> str:
        return format_tool_call(name, arguments)


_ANALYSIS = re.compile(r"(?:<\|start\|>assistant)?<\|channel\|>analysis<\|message\|>.*?(?:<\|end\|>|$)", re.S)
_CALL = re.compile(
    r"(?:<\|start\|>assistant)?<\|channel\|>[^<]*?to=functions\.([^\s<]+)\s*(?:<\|constrain\|>json)?"
    r"<\|message\|>(.*?)<\|call\|>",
    re.S,
)
_OPEN_CALL = re.compile(r"<\|channel\|>[^<]*?to=functions\.")


@TOOL_CALL_FORMATS.register("gpt-oss")
class GptOssFormat(ToolCallFormat):
    name = "gpt-oss"
    call_end = "<|call|>"

    def parse(self, text: str) -> ParsedTurn:
        visible = _ANALYSIS.sub("", text)
        turn = ParsedTurn(content=_CALL.sub("", visible))
        for name, body in _CALL.findall(visible):
            parsed = parse_arguments(name, body)
            if isinstance(parsed, str):
                turn.errors.append(parsed)
            else:
                turn.calls.append(parsed)
        if _OPEN_CALL.search(turn.content):
            turn.errors.append("Error: a call to functions.<name> was opened but never ended with <|call|>")
            turn.content = turn.content[: _OPEN_CALL.search(turn.content).start()]
        turn.content = turn.content.strip()
        return turn

    def format_call(self, name: str, arguments: dict[str, Any]) -> str:
        return (
            f"<|start|>assistant<|channel|>commentary to=functions.{name} <|constrain|>json<|message|>"
            f"{json.dumps(arguments)}<|call|>"
        )


def tool_call_format(name: str) -> ToolCallFormat:
    """The format registered under ``name``; an unknown name lists the supported ones."""
    return TOOL_CALL_FORMATS.get(name)()
