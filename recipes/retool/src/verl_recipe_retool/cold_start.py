"""ReTool's cold start for the CPU default: SFT of a tiny model on generated tool-using traces.

A trace is made by verl-agent's tool agent itself, with a scripted model in place of the policy and the
real ``code_interpreter`` (the real sandbox) as the tool: the model turn writes the code block, the tool
turn is whatever the sandbox printed, and the last model turn states that output as the answer. So the
training sequences are token for token what RL rollouts look like, tool turns included, and the loss
mask is the loop's own ``response_mask`` (tool tokens 0): the cold start, like RL, never trains on tool
output. The A/B's no-tool arm trains on direct answers (``\\boxed{<product>}``) through the same loop with
no tools, for the same number of steps. The rows come with the prompts RL will see (with
``retool.answer_format``, upstream's answer-format instruction appended).

With ``retool.cold_start_data`` the traces come instead from a local file in the ReTool-SFT format, converted
as upstream's preprocessing does (`verl_recipe_retool.sft_data`) and tokenized with the chat template,
assistant turns trained, user and tool turns masked.
"""

from __future__ import annotations

import asyncio
import random
import shutil
from pathlib import Path
from typing import Any

from verl_recipe_retool import task

MODEL_SIZE = "xs"
SEED = 0
TOOL_TURN = "<|im_start|>tool\n"  # the tiny chat template's tool message header
CONCURRENT_TRACES = 8


def _tool_output(prompt_text: str) -> str:
    """The last tool message's text in a conversation rendered by the tiny chat template."""
    if TOOL_TURN not in prompt_text:
        raise ValueError("the scripted answer turn came before any tool turn")
    return prompt_text.rsplit(TOOL_TURN, 1)[1].split("<|im_end|>", 1)[0]


async def _trace(row: dict, rollout_cfg: Any, tokenizer: Any, tools: list, use_tool: bool) -> dict:
    from verl.agent.server import ScriptedLLMServer
    from verl.agent.tool_agent import ToolAgentLoop

    turns = task.tool_turns(row) if use_tool else task.direct_turns(row)

    def respond(prompt_text: str) -> str:
        k = prompt_text.count("<|im_start|>assistant\n") - 1  # assistant turns already taken
        return (
            turns[k].format(tool_output=_tool_output(prompt_text))
            if "{tool_output}" in turns[k]
            else turns[k]
        )

    stop = [tokenizer.convert_tokens_to_ids("<|im_end|>"), tokenizer.eos_token_id]
    loop = ToolAgentLoop(rollout_cfg, ScriptedLLMServer(respond, stop, tokenizer), tokenizer, tools=tools)
    out = await loop.run({}, raw_prompt=row["prompt"])
    return {
        "ids": out.prompt_ids + out.response_ids,
        "mask": [0] * len(out.prompt_ids) + list(out.response_mask),
        "response": tokenizer.decode(out.response_ids, skip_special_tokens=True),
        "ground_truth": row["reward_model"]["ground_truth"],
        "stop_reason": out.extra_fields["stop_reason"],
    }


def make_traces(rows: list[dict], rollout_cfg: Any, tokenizer: Any, use_tool: bool) -> list[dict]:
    """One trace per row (see the module doc). Every tool trace must score 1 with the task's scorer
    (the sandbox printed the product and the answer states it): a sandbox that cannot run the code
    stops the cold start here, before a model learns from broken traces."""
    from verl_recipe_retool.tools import ReToolCodeInterpreter

    tools = [ReToolCodeInterpreter({"sandbox": "local", "default_timeout": 10})] if use_tool else []

    # A bounded number of traces at a time: hundreds of sandbox processes at once on a loaded 2-core machine
    # ran past the tool timeout (measured: 19 of 256 calls, load 7).
    limit = asyncio.Semaphore(CONCURRENT_TRACES)

    async def one(row: dict) -> dict:
        async with limit:
            return await _trace(row, rollout_cfg, tokenizer, tools, use_tool)

    async def run_all() -> list[dict]:
        return list(await asyncio.gather(*(one(r) for r in rows)))

    traces = asyncio.run(run_all())
    for i, t in enumerate(traces):
        scored = task.compute_score(task.DATA_SOURCE, t["response"], t["ground_truth"])
        if scored["acc"] != 1.0 or (use_tool and scored["tool_correct"] != 1.0):
            raise RuntimeError(
                f"cold-start trace {i} is wrong: {t['response']!r}, expected {t['ground_truth']} (the loop "
                f"stopped with {t['stop_reason']!r}: 'response_length' means data.max_response_length is too "
                "short for a whole trace; 'done' with a wrong tool output means the sandbox did not run the code)"
            )
    return traces


def traces_from_sft_data(path: str, tokenizer: Any) -> list[dict]:
    """Traces of the conversations in a ReTool-SFT file (see the module doc)."""
    from verl.utils.dataset.sft_dataset import tokenize_conversation

    from verl_recipe_retool.sft_data import convert_file, hermes_conversation

    traces = []
    for i, converted in enumerate(convert_file(path)):
        ids, mask = tokenize_conversation(tokenizer, hermes_conversation(converted), f"{path}: row {i}")
        traces.append({"ids": ids, "mask": mask})
    if not traces:
        raise ValueError(f"retool.cold_start_data={path}: the file has no rows")
    return traces


def sft(
    model: Any, traces: list[dict], steps: int, lr: float = 3e-3, batch: int = 16, seed: int = SEED
) -> float:
    """Masked next-token cross-entropy (AdamW) on random batches of traces; returns the last loss."""
    import torch

    gen = random.Random(seed)
    torch.manual_seed(seed)
    # One intra-op thread: the model is too small to gain from more, and on a shared CPU extra OpenMP
    # threads spin against other processes (measured: several times slower under load).
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    model.train()
    loss = torch.tensor(float("nan"))
    for step in range(steps):
        picked = gen.sample(traces, k=min(batch, len(traces)))
        width = max(len(t["ids"]) for t in picked)
        ids = torch.zeros((len(picked), width), dtype=torch.long)
        mask = torch.zeros_like(ids)
        attn = torch.zeros_like(ids)
        for r, t in enumerate(picked):
            n = len(t["ids"])
            ids[r, :n] = torch.tensor(t["ids"])
            mask[r, :n] = torch.tensor(t["mask"])
            attn[r, :n] = 1
        logits = model(input_ids=ids, attention_mask=attn).logits[:, :-1].float()
        nll = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1), reduction="none"
        )
        m = mask[:, 1:].reshape(-1).float()
        loss = (nll * m).sum() / m.sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if (step + 1) % 50 == 0:
            print(f"cold start: SFT step {step + 1}/{steps}, loss {float(loss):.4f}", flush=True)
    torch.set_num_threads(threads)
    model.eval()
    return float(loss.detach())


def build_cold_start_model(
    out_dir: Path, rows: list[dict], rollout_cfg: Any, steps: int, use_tool: bool, sft_data: str | None = None
) -> Path:
    """A tiny random-init Qwen2, SFT'd for ``steps`` steps on ``rows``' traces (or, with ``sft_data``, on that
    ReTool-SFT file's conversations), saved with ``save_pretrained`` (built next to ``out_dir`` and renamed
    when done, so an interrupted build is never reused)."""
    from verl.workers.tiny import build_tiny_qwen2
    from verl.workers.tokenizer import hf_tokenizer

    partial = out_dir.with_name(out_dir.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    model = build_tiny_qwen2(partial, size=MODEL_SIZE, seed=SEED)
    tok = hf_tokenizer(str(partial))
    traces = traces_from_sft_data(sft_data, tok) if sft_data else make_traces(rows, rollout_cfg, tok, use_tool)
    loss = sft(model, traces, steps) if steps > 0 else float("nan")
    print(
        f"cold start: {steps} SFT steps on {len(traces)} {'tool' if use_tool else 'direct'} traces"
        f"{f' from {sft_data}' if sft_data else ''}, last loss {loss:.4f}",
        flush=True,
    )
    model.save_pretrained(str(partial))
    partial.rename(out_dir)
    return out_dir
