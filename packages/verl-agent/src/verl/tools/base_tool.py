"""`BaseTool`: a tool with a per-trajectory life cycle (upstream's ``verl.tools.base_tool``).

``create`` an instance for one trajectory (e.g. with the row's ground truth), ``execute`` the model's
calls against it any number of times, ``calc_reward`` when the trajectory ends, ``release``.
"""

from __future__ import annotations

import uuid
from typing import Any, ClassVar

from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse


class BaseTool:
    """Subclass and override `execute` (and optionally `create`, `calc_reward`, `release`).

    Args:
        config: the tool's ``config`` mapping from the tool YAML file.
        tool_schema: the schema shown to the model; None takes `get_openai_tool_schema` (a subclass
            may override it or set ``default_schema``).
    """

    #: schema used when none is given (built-in tools set one; a dict or a model)
    default_schema: ClassVar[dict[str, Any] | OpenAIFunctionToolSchema | None] = None

    def __init__(self, config: dict | None, tool_schema: OpenAIFunctionToolSchema | dict | None = None):
        self.config = dict(config or {})
        self.tool_schema: OpenAIFunctionToolSchema | None = None
        schema = tool_schema if tool_schema is not None else self.get_openai_tool_schema()
        if schema is None:
            raise ValueError(
                f"{type(self).__name__}: no tool schema; pass tool_schema (or give the class a default_schema)"
            )
        self.tool_schema = (
            schema if isinstance(schema, OpenAIFunctionToolSchema) else OpenAIFunctionToolSchema.model_validate(schema)
        )
        self.name = self.tool_schema.function.name
        self._instance_dict: dict[str, dict[str, Any]] = {}

    def get_openai_tool_schema(self) -> OpenAIFunctionToolSchema | None:
        """The schema shown to the model (during ``__init__``: the class default, if any)."""
        if self.tool_schema is not None:
            return self.tool_schema
        default = type(self).default_schema
        if default is None or isinstance(default, OpenAIFunctionToolSchema):
            return default
        return OpenAIFunctionToolSchema.model_validate(default)

    async def create(self, instance_id: str | None = None, **kwargs: Any) -> tuple[str, ToolResponse]:
        """Start an instance; ``kwargs`` are the row's ``tools_kwargs[name].create_kwargs``.
        Returns the instance id and what the tool says on creation (usually nothing)."""
        instance_id = instance_id or str(uuid.uuid4())
        self._instance_dict[instance_id] = dict(kwargs)
        return instance_id, ToolResponse()

    async def execute(
        self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
    ) -> tuple[ToolResponse, float, dict]:
        """Run one call: (response shown to the model, step reward, metrics). The base class only
        acknowledges the call (upstream's default); tools override this."""
        return ToolResponse(text="Updated the tool state."), 0.0, {}

    async def calc_reward(self, instance_id: str, **kwargs: Any) -> float:
        """The tool's reward for the whole trajectory (0 unless a tool keeps score)."""
        return 0.0

    async def release(self, instance_id: str, **kwargs: Any) -> None:
        self._instance_dict.pop(instance_id, None)
