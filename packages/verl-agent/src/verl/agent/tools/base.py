"""Tools a model calls during a rollout (upstream: ``verl.tools.base_tool.BaseTool``).

A tool has an OpenAI function schema (shown to the model through the chat template) and a life
cycle per trajectory: ``create`` an instance (e.g. with the row's ground truth), ``execute`` calls
with parsed arguments any number of times, ``calc_reward`` at the end, ``release``.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any, ClassVar


@dataclass
class OpenAIFunctionToolSchema:
    """``{"type": "function", "function": {"name", "description", "parameters": JSON schema}}``."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = field(
        default_factory=lambda: {"type": "object", "properties": {}, "required": []}
    )

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = "tool_schema") -> OpenAIFunctionToolSchema:
        if (
            not isinstance(data, dict)
            or data.get("type", "function") != "function"
            or not isinstance(data.get("function"), dict)
        ):
            raise ValueError(
                f"{where}: expected an OpenAI function schema "
                f"{{'type': 'function', 'function': {{'name': ..., 'parameters': ...}}}}, got {data!r}"
            )
        fn = data["function"]
        if not isinstance(fn.get("name"), str) or not fn["name"]:
            raise ValueError(f"{where}: function.name must be a non-empty string, got {fn.get('name')!r}")
        params = fn.get("parameters") or {"type": "object", "properties": {}, "required": []}
        if params.get("type") != "object":
            raise ValueError(
                f"{where}: function.parameters.type must be 'object', got {params.get('type')!r}"
            )
        return cls(name=fn["name"], description=fn.get("description", ""), parameters=dict(params))

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }


class BaseTool:
    """Subclass and override `execute` (and optionally `create`, `calc_reward`, `release`).

    ``config`` is the tool's ``config`` mapping from the tool YAML file; ``tool_schema`` its schema.
    """

    #: schema used when the YAML entry gives no ``tool_schema`` (built-in tools set one)
    default_schema: ClassVar[dict[str, Any] | None] = None

    def __init__(
        self, config: dict[str, Any] | None = None, tool_schema: OpenAIFunctionToolSchema | dict | None = None
    ):
        tool_schema = tool_schema if tool_schema is not None else type(self).default_schema
        if tool_schema is None:
            raise ValueError(f"{type(self).__name__}: pass tool_schema (the class has no default_schema)")
        self.config = dict(config or {})
        if isinstance(tool_schema, dict):
            tool_schema = OpenAIFunctionToolSchema.from_dict(tool_schema, where=type(self).__name__)
        self.tool_schema = tool_schema
        self.name = tool_schema.name
        self._instances: dict[str, dict[str, Any]] = {}

    def get_openai_tool_schema(self) -> OpenAIFunctionToolSchema:
        return self.tool_schema

    async def create(self, instance_id: str | None = None, **kwargs: Any) -> str:
        """Start an instance for one trajectory; ``kwargs`` are the row's ``create_kwargs``."""
        instance_id = instance_id or str(uuid.uuid4())
        self._instances[instance_id] = dict(kwargs)
        return instance_id

    async def execute(
        self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
    ) -> tuple[str, float, dict[str, Any]]:
        """Run one call: returns (text shown to the model, step reward, metrics)."""
        raise NotImplementedError(f"{type(self).__name__}.execute")

    async def calc_reward(self, instance_id: str, **kwargs: Any) -> float:
        return 0.0

    async def release(self, instance_id: str, **kwargs: Any) -> None:
        self._instances.pop(instance_id, None)
