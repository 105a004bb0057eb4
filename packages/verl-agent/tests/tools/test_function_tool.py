import asyncio
from typing import Literal

import pytest
from verl.agent.tools.function_tool import function_tool, parse_docstring


@function_tool
def lookup(city: str, unit: Literal["c", "f"] = "c", days: list[int] | None = None) -> str:
    """Weather for a city.

    More text that is not the description.

    Args:
        city: the city name
        unit: temperature unit,
            c or f
        days: which days ahead

    Returns:
        a sentence
    """
    return f"{city}:{unit}:{days}"


def test_schema_from_signature_and_docstring():
    assert lookup.name == "lookup"
    assert lookup.tool_schema.to_dict() == {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": "Weather for a city.",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": "the city name"},
                    "unit": {"type": "string", "enum": ["c", "f"], "description": "temperature unit, c or f"},
                    "days": {
                        "type": "array",
                        "items": {"type": "integer"},
                        "description": "which days ahead",
                    },
                },
                "required": ["city"],
            },
        },
    }


def test_execute_validates_arguments():
    async def go():
        iid = await lookup.create()
        ok = await lookup.execute(iid, {"city": "Oslo", "days": [1, 2]})
        missing = await lookup.execute(iid, {"unit": "c"})
        bad_enum = await lookup.execute(iid, {"city": "Oslo", "unit": "k"})
        unknown = await lookup.execute(iid, {"city": "Oslo", "x": 1})
        return ok, missing, bad_enum, unknown

    ok, missing, bad_enum, unknown = asyncio.run(go())
    assert ok == ("Oslo:c:[1, 2]", 0.0, {})
    assert missing[0].startswith("Error: missing required argument(s) ['city']")
    assert "'unit'='k'" in bad_enum[0]
    assert "unknown argument(s) ['x']" in unknown[0]


def test_async_function_and_name_override():
    @function_tool(name="adder")
    async def add(a: int, b: int) -> int:
        """Add."""
        return a + b

    assert add.name == "adder"
    assert asyncio.run(add.execute("i", {"a": 2, "b": 3}))[0] == "5"
    assert asyncio.run(add.execute("i", {"a": True, "b": 3}))[0].startswith("Error: argument 'a'")


def test_unannotated_parameter_is_an_error():
    def f(x):
        """Nothing."""

    with pytest.raises(TypeError, match="parameter 'x' needs a type annotation"):
        function_tool(f)


def test_docstring_without_args():
    assert parse_docstring("Just this.\n\nMore.") == ("Just this.", {})
