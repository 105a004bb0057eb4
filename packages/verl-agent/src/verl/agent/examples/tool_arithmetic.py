"""Arithmetic with a calculator tool: the agent must write the expression, read the result, answer.

Rows are core's built-in arithmetic rows (``data_source="arithmetic"``: the reward is 1 when the
text after the last ``####`` of the response equals the answer) run by ``tool_agent``. The
calculator computes only what the model writes in its call's ``expression`` argument: a call
without it, or with a wrong expression, gets an error or the wrong number, and only the final
answer is rewarded. `demonstration` gives the ideal conversation (for a warm start).
"""

from __future__ import annotations

import ast
import operator
from typing import Any

from verl.agent.tools.base import BaseTool, ToolResponse
from verl.agent.tools.parser import format_tool_call
from verl.registries import TOOLS

_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv}
_MAX_DIGITS = 30  # refuse results a model could use to burn the tool's CPU (9**9**9 and the like)


def evaluate(expression: str) -> int:
    """Integer arithmetic (+, -, *, //, parentheses, unary minus) without eval; a trailing ``=`` is ignored."""

    def walk(node: ast.AST) -> int:
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            value = _OPS[type(node.op)](walk(node.left), walk(node.right))
            if len(str(abs(value))) > _MAX_DIGITS:
                raise ValueError(f"result has more than {_MAX_DIGITS} digits")
            return value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -walk(node.operand)
        raise ValueError(f"unsupported expression {expression!r}: only integers with + - * // ( )")

    return walk(ast.parse(expression.strip().removesuffix("=").strip(), mode="eval"))


@TOOLS.register("calculator")
class CalculatorTool(BaseTool):
    default_schema = {
        "type": "function",
        "function": {
            "name": "calculator",
            "description": "Evaluate an integer arithmetic expression.",
            "parameters": {
                "type": "object",
                "properties": {"expression": {"type": "string", "description": "e.g. 23+45"}},
                "required": ["expression"],
            },
        },
    }

    def __init__(self, config: dict | None = None, tool_schema: Any = None):
        super().__init__(config, tool_schema)

    async def execute(
        self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
    ) -> tuple[ToolResponse, float, dict]:
        expression = parameters.get("expression")
        if not isinstance(expression, str) or not expression.strip():
            return ToolResponse(text="Error: give an 'expression' string"), 0.0, {"tool_error": 1.0}
        try:
            return ToolResponse(text=str(evaluate(expression))), 0.0, {}
        except (ValueError, SyntaxError, ZeroDivisionError) as e:
            return ToolResponse(text=f"Error: {e}"), 0.0, {"tool_error": 1.0}


def make_tool_arithmetic_rows(n: int, seed: int, digits: int = 2, split: str = "train") -> list[dict]:
    """Core's arithmetic rows, run by ``tool_agent``. Nothing of the problem reaches the tool."""
    from verl.utils.dataset.tasks import make_arithmetic_rows

    rows = make_arithmetic_rows(n, seed=seed, digits=digits, split=split)
    for row in rows:
        row["agent_name"] = "tool_agent"
    return rows


def demonstration(row: dict) -> list[dict]:
    """The conversation a good agent has for ``row``: call with the problem's expression, read, answer."""
    expression = row["prompt"][-1]["content"].strip().removesuffix("=")
    answer = str(evaluate(expression))
    return list(row["prompt"]) + [
        {"role": "assistant", "content": format_tool_call("calculator", {"expression": expression})},
        {"role": "tool", "content": answer},
        {"role": "assistant", "content": f"#### {answer}"},
    ]
