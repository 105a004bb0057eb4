"""ReTool-SFT data for the cold start: upstream's preprocessing (``recipe/retool/retool_sft_preprocess.py``)
of rows in the ReTool-SFT format (the ``JoeYing/ReTool-SFT`` dataset's columns), read from a local file.

A ReTool-SFT row has ``messages``: a user message whose question follows ``*user question:*`` (``<answer>``
tags in it are dropped), and one assistant message that interleaves text, ``<code>...</code>`` (a
```` ```python ``` ```` block inside is unwrapped), ``<interpreter>...</interpreter>`` (the sandbox's output)
and a final ``<answer>...</answer>``. `convert_row` turns it into upstream's multi-turn tool-calling
conversation: the question as the user turn; each text + code as an assistant turn with a
``code_interpreter`` tool call; each interpreter output as a ``tool`` turn; the answer (text before the tag
and the tag's content) as the last assistant turn; plus ``tools``, the tool schemas.

    uv run --package verl-recipe-retool python -m verl_recipe_retool.sft_data IN.parquet OUT.parquet

writes upstream's converted rows (``messages`` with ``tool_calls``, ``tools``). With
``retool.cold_start_data=IN.parquet`` the recipe's cold start trains on the converted conversations, the
tool calls written in the rollout's tool-call format (`hermes_conversation`), instead of generated traces.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

QUESTION = "*user question:*"
_PYTHON_BLOCK = re.compile(r"```python(.*?)```", re.DOTALL)


class ReToolSFTFormatError(ValueError):
    """A row that is not in the ReTool-SFT format, with the row and what is wrong."""


def _between(content: str, start: str, stop: str, where: str) -> tuple[int, int] | None:
    i = content.find(start)
    if i == -1:
        return None
    j = content.find(stop)
    if j < i:
        raise ReToolSFTFormatError(f"{where}: {start} at char {i} is not closed by a later {stop}")
    return i, j


def _code_turn(content: str, where: str) -> tuple[dict | None, str]:
    span = _between(content, "<code>", "</code>", where)
    if span is None:
        return None, content
    i, j = span
    code = content[i + len("<code>") : j]
    blocks = _PYTHON_BLOCK.findall(code)
    if blocks:
        code = blocks[0].strip()
    call = {"type": "function", "function": {"name": "code_interpreter", "arguments": {"code": code}}}
    return {"role": "assistant", "content": content[:i].strip(), "tool_calls": [call]}, content[j + len("</code>") :]


def _answer_turn(content: str, where: str) -> tuple[dict | None, str]:
    span = _between(content, "<answer>", "</answer>", where)
    if span is None:
        return None, content
    i, j = span
    answer = content[:i] + content[i + len("<answer>") : j]
    return {"role": "assistant", "content": answer.strip()}, content[j + len("</answer>") :]


def _interpreter_turn(content: str, where: str) -> tuple[dict | None, str]:
    span = _between(content, "<interpreter>", "</interpreter>", where)
    if span is None:
        return None, content
    i, j = span
    return {"role": "tool", "content": content[i + len("<interpreter>") : j].strip()}, content[
        j + len("</interpreter>") :
    ]


def convert_row(row: dict, tools: list[dict], where: str = "row") -> dict:
    """Upstream's conversion of one ReTool-SFT row (see the module doc)."""
    messages = row.get("messages")
    if not isinstance(messages, list) or len(messages) < 2:
        raise ReToolSFTFormatError(
            f"{where}: a ReTool-SFT row has 'messages' [user, assistant]; got {type(messages).__name__} "
            f"(columns: {sorted(row)})"
        )
    question = messages[0]["content"]
    k = question.find(QUESTION)
    if k == -1:
        raise ReToolSFTFormatError(f"{where}: messages[0] has no {QUESTION!r} marker before the question")
    prompt = question[k + len(QUESTION) :].replace("<answer>", "").replace("</answer>", "").strip()
    out: list[dict[str, Any]] = [{"role": "user", "content": prompt}]
    content, role = messages[1]["content"], "assistant"
    while content:
        if role == "assistant":
            message, content = _code_turn(content, where)
            if message is None:
                message, content = _answer_turn(content, where)
            role = "tool"
        else:
            message, content = _interpreter_turn(content, where)
            role = "assistant"
        if message is None:
            raise ReToolSFTFormatError(
                f"{where}: after turn {len(out)} expected {'<interpreter>' if role == 'assistant' else '<code> or <answer>'}"
                f", found {content[:80]!r}"
            )
        out.append(message)
    return {"messages": out, "tools": tools}


def hermes_conversation(converted: dict) -> list[dict]:
    """The converted conversation with each assistant tool call written as text in the rollout's format
    (``<tool_call>{...}</tool_call>`` after the turn's text), as the policy writes it in RL rollouts."""
    from verl.agent.tools.parser import format_tool_call

    out = []
    for m in converted["messages"]:
        content = m["content"]
        for call in m.get("tool_calls") or []:
            fn = call["function"]
            content = content + format_tool_call(fn["name"], dict(fn["arguments"]))
        out.append({"role": m["role"], "content": content})
    return out


def tool_schemas() -> list[dict]:
    """The ``code_interpreter`` schema of the recipe's tool config (upstream reads its sandbox config)."""
    from omegaconf import OmegaConf
    from verl.trainer.config.recipes import recipe_configs_dir

    tools = OmegaConf.load(recipe_configs_dir(__file__) / "tool_config" / "code_interpreter_local.yaml")
    return [OmegaConf.to_container(t.tool_schema) for t in tools.tools]


def convert_file(path: str | Path) -> list[dict]:
    """Every row of a local ReTool-SFT file (parquet / jsonl / json), converted."""
    from verl.utils.dataset.rows import read_rows

    tools = tool_schemas()
    return [convert_row(row, tools, f"{path}: {label}") for label, row in read_rows(path)]


def main(argv: list[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2:
        raise SystemExit("usage: python -m verl_recipe_retool.sft_data IN.parquet OUT.parquet")
    from verl.utils.dataset import write_parquet

    rows = convert_file(args[0])
    write_parquet(rows, args[1])
    print(f"wrote {len(rows)} conversations to {args[1]}")


if __name__ == "__main__":
    main()
