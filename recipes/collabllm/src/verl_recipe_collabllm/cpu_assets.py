"""What the CPU default needs and a fresh clone does not have: the task data and a warm-started tiny model.

When the config leaves ``data.train_files`` or ``actor_rollout_ref.model.path`` unset, `built_in` writes
them under ``{trainer.default_local_dir}/assets`` (reused when already there; core's ``recipe_assets``)
and returns the ``key=value`` overrides that point the config at them:

- data: the built-in task (`verl_recipe_collabllm.task`: "Add 3 to my number." with the number kept
  back): train rows at both turns (the opening request, and after the number was asked for and given),
  held-out test rows that open the conversation (validation plays whole conversations from the request);
- model: a tiny random-init Qwen2 (``verl.workers.tiny``) fine-tuned on demonstrations (plain torch,
  in process): a quarter of them ask for the number first, the rest guess; adding after being told
  the number is taught on every row. So the policy starts out asking about a quarter of the time and
  adding right often, and RL has something to find: asking pays.
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path
from typing import Any

from omegaconf import DictConfig
from verl.trainer.recipe_assets import BuiltIn, task_and_model

from verl_recipe_collabllm import task

WARM_START_STEPS = 800
ASK_SHARE = 0.25  # of the warm start's first turns: the policy's initial clarifying-question rate
MODEL_SIZE = "xs"
SEED = 0


def write_task(out_dir: Path) -> tuple[Path, Path]:
    from verl.utils.dataset import write_parquet

    return (
        write_parquet(task.make_rows("train", answer_turns=True), out_dir / "train.parquet"),
        write_parquet(task.make_rows("test"), out_dir / "test.parquet"),
    )


def supervised_example(
    tokenizer: Any, messages: list[dict], trained: list[bool]
) -> tuple[list[int], list[int]]:
    """(ids, loss mask) of a conversation rendered by the chat template; the mask is 1 on the trained
    assistant messages' tokens and their end-of-turn token (what the policy generates), 0 elsewhere."""

    def ids(msgs: list[dict], gen: bool) -> list[int]:
        text = tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=gen)
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])

    full = ids(messages, False)
    mask = [0] * len(full)
    end_of_turn = tokenizer.convert_tokens_to_ids("<|im_end|>")
    for k, (m, train) in enumerate(zip(messages, trained)):
        if not train:
            continue
        if m["role"] != "assistant":
            raise ValueError(f"message {k} is a {m['role']!r} message; only assistant messages are trained")
        start = len(ids(messages[:k], True))
        end = full.index(end_of_turn, start) + 1  # the content and the end-of-turn token
        if full[:start] != ids(messages[:k], True):
            raise ValueError("the chat template does not render conversations incrementally")
        mask[start:end] = [1] * (end - start)
    return full, mask


def warm_start(model: Any, examples: list[tuple[list[int], list[int]]], steps: int, lr: float = 3e-3,
               batch: int = 32, seed: int = SEED) -> float:  # fmt: skip
    """Masked next-token cross-entropy (AdamW) on random batches of ``examples``; returns the last loss."""
    import torch
    from verl.workers.tiny import masked_next_token_loss, pad_masked_rows

    gen = random.Random(seed)
    torch.manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    model.train()
    loss = torch.tensor(float("nan"))
    for _ in range(steps):
        ids, attn, mask = pad_masked_rows(gen.sample(examples, k=min(batch, len(examples))))
        loss = masked_next_token_loss(model, ids, attn, mask)
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    return float(loss.detach())


def build_warm_model(out_dir: Path, steps: int, ask_share: float = ASK_SHARE) -> Path:
    """The tiny Qwen2, warm-started on the train split's demonstrations, saved with ``save_pretrained``."""
    from verl.workers.tiny import build_tiny_qwen2
    from verl.workers.tokenizer import hf_tokenizer

    # Built next to out_dir and renamed when done: an interrupted warm start is never mistaken for a finished one.
    partial = out_dir.with_name(out_dir.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    model = build_tiny_qwen2(partial, size=MODEL_SIZE, seed=SEED)
    tok = hf_tokenizer(str(partial))
    demos = task.demonstrations(task.make_rows("train"), ask_share=ask_share, seed=SEED)
    examples = [supervised_example(tok, msgs, trained) for msgs, trained in demos]
    warm_start(model, examples, steps)
    model.save_pretrained(str(partial))
    partial.rename(out_dir)
    return out_dir


def built_in(cfg: DictConfig, built: BuiltIn) -> list[str]:
    """``key=value`` overrides for the unset data files / model path, creating the assets on first use
    (the model warm-started for `WARM_START_STEPS`, read when the assets are made)."""
    steps = WARM_START_STEPS
    return task_and_model(
        cfg, built.root, write_task, lambda out, _train: build_warm_model(out, steps), f"tiny_qwen2_warm{steps}"
    )
