"""OpenAI function-calling shapes as pydantic models, and a tool's response (upstream names).

A tool is shown to the model as ``{"type": "function", "function": {"name", "description",
"parameters": {"type": "object", "properties": {...}, "required": [...]}}}``
(`OpenAIFunctionToolSchema`); a call the model writes parses to `OpenAIFunctionCallSchema`; a tool
answers with a `ToolResponse` (text, and images / videos for multi-modal models).
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class OpenAIFunctionPropertySchema(BaseModel):
    """One parameter. ``type`` is a JSON-schema type name, or a list of them for unions.
    Other JSON-schema keywords (``items``, ``default``, ...) are kept as given."""

    model_config = ConfigDict(extra="allow")

    type: str | list[str]
    description: str | None = None
    enum: list[Any] | None = None


class OpenAIFunctionParametersSchema(BaseModel):
    type: str
    properties: dict[str, OpenAIFunctionPropertySchema]
    required: list[str] = Field(default_factory=list)


class OpenAIFunctionSchema(BaseModel):
    name: str
    description: str
    parameters: OpenAIFunctionParametersSchema = Field(
        default_factory=lambda: OpenAIFunctionParametersSchema(type="object", properties={}, required=[])
    )
    strict: bool = False


class OpenAIFunctionToolSchema(BaseModel):
    type: str
    function: OpenAIFunctionSchema

    def to_dict(self) -> dict[str, Any]:
        """The plain dict a chat template's ``tools=`` takes (fields not given are left out)."""
        return self.model_dump(exclude_unset=True, exclude_none=True)


class OpenAIFunctionParsedSchema(BaseModel):
    """A call as the model wrote it: arguments still a JSON string."""

    name: str
    arguments: str


class OpenAIFunctionCallSchema(BaseModel):
    name: str
    arguments: dict[str, Any]

    @staticmethod
    def from_openai_function_parsed_schema(
        parsed_schema: OpenAIFunctionParsedSchema,
    ) -> tuple[OpenAIFunctionCallSchema, bool]:
        """The call with its arguments decoded, and whether decoding failed (then ``arguments={}``)."""
        try:
            arguments = json.loads(parsed_schema.arguments)
        except json.JSONDecodeError:
            return OpenAIFunctionCallSchema(name=parsed_schema.name, arguments={}), True
        if not isinstance(arguments, dict):
            return OpenAIFunctionCallSchema(name=parsed_schema.name, arguments={}), True
        return OpenAIFunctionCallSchema(name=parsed_schema.name, arguments=arguments), False


class OpenAIFunctionToolCall(BaseModel):
    id: str
    type: Literal["function"] = "function"
    function: OpenAIFunctionCallSchema


class ToolResponse(BaseModel):
    """What a tool returns to the conversation. ``image`` / ``video`` must be lists."""

    text: str | None = None
    image: list[Any] | None = None
    video: list[Any] | None = None

    @model_validator(mode="before")
    @classmethod
    def _media_are_lists(cls, values: Any) -> Any:
        if isinstance(values, dict):
            for key in ("image", "video"):
                if key in values and values[key] is not None and not isinstance(values[key], list):
                    raise ValueError(
                        f"ToolResponse.{key} must be a list, got {type(values[key]).__name__}; "
                        f"wrap a single item as [{key}]"
                    )
        return values

    def is_empty(self) -> bool:
        return not self.text and not self.image and not self.video

    def is_text_only(self) -> bool:
        return bool(self.text) and not self.image and not self.video
