"""Tools a model calls during a rollout: verl-agent's view of `verl.tools` (one implementation).

`BaseTool`, `OpenAIFunctionToolSchema` and `ToolResponse` are upstream's names from ``verl.tools``;
`tool_text` reads what the model sees of a response.
"""

from __future__ import annotations

from verl.tools.base_tool import BaseTool
from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse

__all__ = ["BaseTool", "OpenAIFunctionToolSchema", "ToolResponse", "tool_text"]


def tool_text(response: ToolResponse) -> str:
    """The text of a tool response (this loop feeds text models: images / videos are refused)."""
    if response.image or response.video:
        raise NotImplementedError(
            "a tool returned images or videos; the tool agent here serves text-only models"
        )
    return response.text or ""
