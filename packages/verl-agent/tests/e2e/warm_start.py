"""Warm-start a tiny model on demonstration trajectories made by the tool loop itself.

The demonstrator is sloppy on purpose: on a ``sloppy`` share of its problems the calculator call
carries only the first operand (``{"expression": "23"}`` for ``23+45=``), so the tool returns 23
and the demonstrated answer is 23, wrong. Every demonstration has the same call format and copies
the tool's result into the answer; what differs is whether the model writes the whole expression.
A model warm-started on it writes well-formed calls, reads the result, and writes an incomplete
expression on about the ``sloppy`` share of problems: the gap GRPO must close from the reward alone.
"""

from __future__ import annotations

import asyncio
import random

import torch
from verl.workers.tiny import masked_next_token_loss, pad_masked_rows


def sloppy_demonstration(row: dict) -> list[str]:
    """The assistant turns of a call that drops the second operand (and an answer copied from the tool)."""
    from verl.agent.tools.parser import format_tool_call

    first = row["prompt"][-1]["content"].split("+")[0]
    return [format_tool_call("calculator", {"expression": first}), f"#### {first}"]


def demo_trajectories(rows, tokenizer, config, stop_ids, sloppy: float = 0.0, seed: int = 0):
    """(ids, loss mask) per row: the tool loop run with a scripted model replaying the demonstration
    (the sloppy one on a seeded ``sloppy`` share of rows)."""
    from verl.agent.examples.tool_arithmetic import CalculatorTool, demonstration
    from verl.agent.server import ScriptedLLMServer
    from verl.agent.tool_agent import ToolAgentLoop

    rng = random.Random(seed)
    out = []
    for row in rows:
        if rng.random() < sloppy:
            turns = sloppy_demonstration(row)
        else:
            turns = [m["content"] for m in demonstration(row) if m["role"] == "assistant"]
        server = ScriptedLLMServer(turns, stop_ids, tokenizer)
        loop = ToolAgentLoop(config, server, tokenizer, tools=[CalculatorTool({})])
        traj = asyncio.run(loop.run({}, raw_prompt=row["prompt"]))
        ids = traj.prompt_ids + traj.response_ids
        mask = [0] * len(traj.prompt_ids) + traj.response_mask
        out.append((ids, mask))
    return out


def warm_start(model, trajectories, steps: int, lr: float = 3e-3, batch: int = 16, seed: int = 0) -> float:
    """Masked next-token cross-entropy on model tokens only; returns the last loss."""
    g = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    model.train()
    ids, attn, mask = pad_masked_rows(trajectories)
    loss = torch.tensor(float("nan"))
    for _ in range(steps):
        pick = torch.randint(0, len(trajectories), (batch,), generator=g)
        loss = masked_next_token_loss(model, ids[pick], attn[pick], mask[pick])
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    return float(loss.detach())
