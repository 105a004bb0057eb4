"""verl-agent: multi-turn agent loops with tool calling and interactions (import ``verl.agent``).

    from verl.agent import AgentLoopManager, HFAsyncServer, ToolAgentLoop, function_tool

See README.md for the pieces and how the trainer uses them.
"""

from verl.agent.agent_loop import AgentLoopBase, AgentLoopOutput, SingleTurnAgentLoop, register_agent_loop
from verl.agent.interactions import BaseInteraction, Gsm8kInteraction, load_interactions
from verl.agent.manager import AgentLoopManager
from verl.agent.server import AsyncLLMServer, HFAsyncServer, ScriptedLLMServer, TokenOutput
from verl.agent.tool_agent import ToolAgentLoop
from verl.agent.tools import BaseTool, OpenAIFunctionToolSchema, function_tool, load_tools, parse_tool_calls

__all__ = [
    "AgentLoopBase",
    "AgentLoopManager",
    "AgentLoopOutput",
    "AsyncLLMServer",
    "BaseInteraction",
    "BaseTool",
    "Gsm8kInteraction",
    "HFAsyncServer",
    "OpenAIFunctionToolSchema",
    "ScriptedLLMServer",
    "SingleTurnAgentLoop",
    "TokenOutput",
    "ToolAgentLoop",
    "function_tool",
    "load_interactions",
    "load_tools",
    "parse_tool_calls",
    "register_agent_loop",
]
