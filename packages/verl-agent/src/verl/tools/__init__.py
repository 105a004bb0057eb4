"""verl.tools: the tool API agent loops call (upstream's ``verl.tools``, owned by verl-agent).

    from verl.tools.base_tool import BaseTool
    from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse
    from verl.tools.function_tool import FUNCTION_TOOL_REGISTRY, function_tool
    from verl.tools.tool_registry import initialize_tools_from_config, load_all_tools

`verl.agent.tools` re-exports these and adds the Hermes parser and the built-in tools.
"""
