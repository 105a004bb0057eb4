"""Warm-start a tiny model on demonstration trajectories made by the tool loop itself."""

from __future__ import annotations

import asyncio

import torch


def demo_trajectories(rows, tokenizer, config, stop_ids):
    """(ids, loss mask) per row: the tool loop run with a scripted model replaying the demonstration."""
    from verl.agent.examples.tool_arithmetic import CalculatorTool, demonstration
    from verl.agent.server import ScriptedLLMServer
    from verl.agent.tool_agent import ToolAgentLoop

    out = []
    for row in rows:
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
    width = max(len(i) for i, _ in trajectories)
    ids = torch.zeros((len(trajectories), width), dtype=torch.long)
    mask = torch.zeros_like(ids)
    attn = torch.zeros_like(ids)
    for k, (i, m) in enumerate(trajectories):
        ids[k, : len(i)] = torch.tensor(i)
        mask[k, : len(m)] = torch.tensor(m)
        attn[k, : len(i)] = 1
    loss = torch.tensor(float("nan"))
    for _ in range(steps):
        pick = torch.randint(0, len(trajectories), (batch,), generator=g)
        logits = model(input_ids=ids[pick], attention_mask=attn[pick]).logits[:, :-1].float()
        target, m = ids[pick][:, 1:], mask[pick][:, 1:].float()
        nll = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), target.reshape(-1), reduction="none"
        )
        loss = (nll * m.reshape(-1)).sum() / m.sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    return float(loss.detach())
