"""verl.tools against upstream's documented behaviour: schemas, ToolResponse, BaseTool's life cycle,
@function_tool and its registry, return normalisation, loading from a file and from YAML."""

import asyncio
import json
from typing import Literal

import pytest
from verl.tools.base_tool import BaseTool
from verl.tools.function_tool import (
    FUNCTION_TOOL_REGISTRY,
    FunctionTool,
    function_tool,
    get_function_tool,
    load_function_tools_from_path,
    normalize_function_tool_return,
)
from verl.tools.schemas import (
    OpenAIFunctionCallSchema,
    OpenAIFunctionParsedSchema,
    OpenAIFunctionToolSchema,
    ToolResponse,
)
from verl.tools.tool_registry import initialize_tools_from_config, load_all_tools


@function_tool
def weather(city: str, unit: Literal["c", "f"] = "c", days: list[int] | None = None) -> str:
    """Weather for a city.

    Args:
        city: the city name
        unit: temperature unit
        days: which days ahead
    """
    return f"{city}:{unit}:{days}"


def test_function_tool_returns_the_function_and_registers_its_schema():
    assert weather("Oslo") == "Oslo:c:None"  # the decorator hands back the plain function
    tool = get_function_tool("weather")
    assert isinstance(tool, FunctionTool) and tool.fn is weather and tool.is_async is False
    assert FUNCTION_TOOL_REGISTRY["weather"] is tool
    assert tool.tool_schema.model_dump(exclude_unset=True, exclude_none=True) == {
        "type": "function",
        "function": {
            "name": "weather",
            "description": "Weather for a city.",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": "the city name"},
                    "unit": {"type": "string", "enum": ["c", "f"], "description": "temperature unit"},
                    "days": {
                        "type": "array",
                        "items": {"type": "integer"},
                        "nullable": True,
                        "description": "which days ahead",
                    },
                },
                "required": ["city"],
            },
        },
    }


def test_rename_async_and_explicit_schema():
    @function_tool("adder_v2")
    async def add(a: int, b: int) -> int:
        """Add.

        Args:
            a: first
            b: second
        """
        return a + b

    tool = get_function_tool("adder_v2")
    assert tool.is_async and tool.tool_schema.function.name == "adder_v2"
    assert asyncio.run(tool.call({"a": 2, "b": 3})) == 5

    schema = {"type": "function", "function": {"name": "raw_v2", "description": "as given"}}

    @function_tool("raw_v2", schema=schema)
    def anything(**kw):  # variadic is fine when the schema is given
        return kw

    assert get_function_tool("raw_v2").tool_schema.function.description == "as given"
    assert asyncio.run(get_function_tool("raw_v2").call({"x": 1})) == {"x": 1}


def test_registration_errors():
    def weather(city: str) -> str:  # same name, another function
        """Other.

        Args:
            city: c
        """

    with pytest.raises(ValueError, match="already registered"):
        function_tool(weather)

    def undocumented(x: int) -> int:
        return x

    with pytest.raises(Exception, match="docstring"):  # transformers' DocstringParsingException
        function_tool(undocumented)

    def variadic(*args: int) -> int:
        """V.

        Args:
            args: numbers
        """

    with pytest.raises(ValueError, match="variadic"):
        function_tool(variadic)
    with pytest.raises(KeyError, match="function_tool_path"):
        get_function_tool("no_such_tool")


def test_normalize_function_tool_return():
    r = ToolResponse(text="t")
    assert normalize_function_tool_return(r) == (r, 0.0, {})
    assert normalize_function_tool_return("s") == (ToolResponse(text="s"), 0.0, {})
    assert normalize_function_tool_return({"k": "é"}) == (ToolResponse(text='{"k": "é"}'), 0.0, {})
    assert normalize_function_tool_return(7) == (ToolResponse(text="7"), 0.0, {})
    assert normalize_function_tool_return(("s",)) == (ToolResponse(text="s"), 0.0, {})
    assert normalize_function_tool_return(("s", None)) == (ToolResponse(text="s"), 0.0, {})
    assert normalize_function_tool_return(("s", 0, None)) == (ToolResponse(text="s"), 0.0, {})
    assert normalize_function_tool_return(("s", 0.5, {"m": 1})) == (ToolResponse(text="s"), 0.5, {"m": 1})
    for bad in ((), ("a", 1, {}, 2)):
        with pytest.raises(TypeError, match="length"):
            normalize_function_tool_return(bad)


def test_tool_response_and_parsed_calls():
    with pytest.raises(ValueError, match="must be a list"):
        ToolResponse(image="img.png")
    assert ToolResponse().is_empty() and not ToolResponse(text="x").is_empty()
    assert ToolResponse(text="x").is_text_only() and not ToolResponse(text="x", image=["i"]).is_text_only()
    call, failed = OpenAIFunctionCallSchema.from_openai_function_parsed_schema(
        OpenAIFunctionParsedSchema(name="f", arguments='{"a": 1}')
    )
    assert call == OpenAIFunctionCallSchema(name="f", arguments={"a": 1}) and not failed
    for text in ("{bad", "[1, 2]"):
        call, failed = OpenAIFunctionCallSchema.from_openai_function_parsed_schema(
            OpenAIFunctionParsedSchema(name="f", arguments=text)
        )
        assert call.arguments == {} and failed


def test_base_tool_life_cycle():
    schema = OpenAIFunctionToolSchema.model_validate(
        {"type": "function", "function": {"name": "noop", "description": "d"}}
    )
    tool = BaseTool({"k": 1}, schema)
    assert tool.name == "noop" and tool.get_openai_tool_schema() is schema and tool.config == {"k": 1}

    async def go():
        given = await tool.create("my-id")
        fresh = await tool.create()
        result = await tool.execute(fresh[0], {})
        return given, fresh, result, await tool.calc_reward(fresh[0]), await tool.release(fresh[0])

    given, fresh, result, reward, released = asyncio.run(go())
    assert given == ("my-id", ToolResponse()) and len(fresh[0]) == 36 and fresh[1] == ToolResponse()
    assert result == (ToolResponse(text="Updated the tool state."), 0.0, {})
    assert reward == 0.0 and released is None
    with pytest.raises(ValueError, match="no tool schema"):
        BaseTool({}, None)


def test_function_tools_from_a_path(tmp_path):
    path = tmp_path / "my_tools.py"
    path.write_text(
        "from verl.tools.function_tool import function_tool\n\n"
        "@function_tool\ndef shout_v2(text: str) -> str:\n"
        '    """Upper-case.\n\n    Args:\n        text: what to shout\n    """\n'
        "    return text.upper(), 0.5\n"
    )
    tools = load_function_tools_from_path(str(path))
    assert [t.name for t in tools] == ["shout_v2"]
    assert load_function_tools_from_path(str(path)) is tools  # loaded once per process
    out = normalize_function_tool_return(asyncio.run(tools[0].call({"text": "hi"})))
    assert out == (ToolResponse(text="HI"), 0.5, {})
    with pytest.raises(FileNotFoundError, match="function_tool_path"):
        load_function_tools_from_path(str(tmp_path / "missing.py"))


def test_tools_from_yaml_and_name_collisions(tmp_path):
    cfg = tmp_path / "tools.yaml"
    cfg.write_text(
        "tools:\n"
        "  - class_name: verl.tools.base_tool.BaseTool\n"
        "    config: {type: native, extra: 3}\n"
        "    tool_schema:\n"
        "      type: function\n"
        "      function: {name: shout_v3, description: d, parameters: {type: object, properties: {}}}\n"
    )
    (tool,) = initialize_tools_from_config(str(cfg))
    assert type(tool) is BaseTool and tool.name == "shout_v3" and tool.config == {"type": "native", "extra": 3}
    fn_file = tmp_path / "fns.py"
    fn_file.write_text(
        "from verl.tools.function_tool import function_tool\n\n"
        "@function_tool('shout_v3')\ndef f(text: str) -> str:\n"
        '    """U.\n\n    Args:\n        text: t\n    """\n'
        "    return text\n"
    )
    with pytest.raises(ValueError, match="shout_v3"):
        load_all_tools(str(cfg), str(fn_file))
    base = "tools:\n  - class_name: verl.tools.base_tool.BaseTool\n"
    for tools_yaml, error, match in (
        (base + "    config: {type: mcp}\n", NotImplementedError, "only 'native'"),
        # upstream's errors, which its callers catch: an unknown type is a ValueError in ToolType's words, a
        # missing class an AttributeError
        (base + "    config: {type: remote}\n", ValueError, r"tools\[0\]: 'remote' is not a valid ToolType"),
        ("tools:\n  - class_name: verl.tools.base_tool.NoSuchTool\n", AttributeError,
         "module 'verl.tools.base_tool' has no attribute 'NoSuchTool'"),
        (base + "    tool_schema: {type: function}\n", ValueError, r"tools\[0\]"),
    ):  # fmt: skip
        path = tmp_path / "tools.yaml"
        path.write_text(tools_yaml)
        with pytest.raises(error, match=match):
            initialize_tools_from_config(str(path))


def test_loop_checks_function_arguments_against_the_schema():
    from verl.agent.tools import validate_arguments

    schema = get_function_tool("weather").tool_schema
    assert validate_arguments(schema, {"city": "Oslo", "days": [1, 2]}) is None
    assert validate_arguments(schema, {"city": "Oslo", "days": None}) is None  # nullable
    assert validate_arguments(schema, {"unit": "c"}).startswith("missing required argument(s) ['city']")
    assert "'unit'='k'" in validate_arguments(schema, {"city": "Oslo", "unit": "k"})
    assert "unknown argument(s) ['x']" in validate_arguments(schema, {"city": "Oslo", "x": 1})
    assert "'days'=['1']" in validate_arguments(schema, {"city": "Oslo", "days": ["1"]})
    assert json.loads(json.dumps(schema.to_dict()))["function"]["name"] == "weather"
