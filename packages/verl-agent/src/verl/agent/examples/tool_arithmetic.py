"""Arithmetic with a calculator tool: the agent calls ``calculator``, reads the result, answers.

Rows are core's built-in arithmetic rows (``data_source="arithmetic"``, scored by exact match of the
text after the last ``####``) with ``agent_name="tool_agent"`` and the expression handed to the
tool instance through ``tools_kwargs.calculator.create_kwargs``, so a call without arguments
computes the row's own problem. `demonstration` gives the ideal conversation (for a warm start).
"""

from __future__ import annotations

import ast
import operator
from typing import Any

from verl.agent.tools.base import BaseTool
from verl.agent.tools.parser import format_tool_call
from verl.registries import TOOLS

_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv}


def evaluate(expression: str) -> int:
    """Integer arithmetic (+, -, *, //, parentheses) without eval."""

    def walk(node: ast.AST) -> int:
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](walk(node.left), walk(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -walk(node.operand)
        raise ValueError(f"unsupported expression {expression!r}: only integers with + - * // ( )")

    return walk(ast.parse(expression.strip().rstrip("="), mode="eval"))


@TOOLS.register("calculator")
class CalculatorTool(BaseTool):
    default_schema = {
        "type": "function",
        "function": {
            "name": "calculator",
            "description": "Evaluate an integer arithmetic expression (default: the current problem).",
            "parameters": {
                "type": "object",
                "properties": {"expression": {"type": "string", "description": "e.g. 23+45"}},
                "required": [],
            },
        },
    }

    async def execute(
        self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
    ) -> tuple[str, float, dict]:
        expression = parameters.get("expression") or self._instances.get(instance_id, {}).get("expression")
        if not isinstance(expression, str):
            return "Error: give an 'expression' string", 0.0, {"tool_error": 1.0}
        try:
            return str(evaluate(expression)), 0.0, {}
        except (ValueError, SyntaxError, ZeroDivisionError) as e:
            return f"Error: {e}", 0.0, {"tool_error": 1.0}


def make_tool_arithmetic_rows(n: int, seed: int, digits: int = 2, split: str = "train") -> list[dict]:
    from verl.utils.dataset.tasks import make_arithmetic_rows

    rows = make_arithmetic_rows(n, seed=seed, digits=digits, split=split)
    for row in rows:
        row["agent_name"] = "tool_agent"
        row["tools_kwargs"] = {"calculator": {"create_kwargs": {"expression": row["prompt"][0]["content"]}}}
    return rows


def demonstration(row: dict) -> list[dict]:
    """The conversation a good agent has for ``row``: call, tool result, answer."""
    answer = row["reward_model"]["ground_truth"]
    return list(row["prompt"]) + [
        {"role": "assistant", "content": format_tool_call("calculator", {})},
        {"role": "tool", "content": answer},
        {"role": "assistant", "content": f"#### {answer}"},
    ]
