"""Build RL and SFT rows from a CollabLLM multiturn dataset (upstream: ``recipe/collabllm/process_dataset.py``).

The CollabLLM datasets (``collabllm/collabllm-multiturn-{math-hard,medium,bigcodebench}[-large]`` on the
Hugging Face hub) hold one row per assistant turn of simulated conversations: ``prompt`` (the
conversation up to that turn), ``completion`` (the chosen assistant turn), ``conv_id``, ``turn_id``,
``score``, ``single_turn_prompt`` (the complete request), ``single_turn_completion`` (its reference
answer), ``single_turn_metadata`` (e.g. BigCodeBench's tests). Export a split to parquet or jsonl
first (this machine has no hub access), then:

    python -m verl_recipe_collabllm.process_dataset --input math-hard-large.parquet --out_dir DIR \\
        [--dataset_type rl|sft] [--data_source lighteval/MATH] [--task_desc "solving math problems"]

- ``rl``: ``{rl_train,rl_validation}.parquet`` in verl's row contract: the prompt behind a system prompt
  asking for collaboration, ``reward_model.ground_truth`` = ``single_turn_completion`` (else
  ``completion``), ``extra_info`` = the row's other fields plus ``interaction_kwargs`` ``{name: collabllm,
  single_turn_prompt, task_desc}`` and the original prompt, ``agent_name`` = ``collabllm_agent``; rows with
  the same prompt kept once. ``data_source`` routes the ``accuracy`` metric to a verl-rewards scorer
  (``lighteval/MATH`` compares ``\\boxed{}`` answers).
- ``sft``: ``{sft_train,sft_validation}.parquet`` with ``messages`` (system + prompt + completion) of
  each conversation's last turn (the best-scored one when a turn has several), for the SFT trainer.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path
from typing import Any

SYSTEM_PROMPT = (
    "You are a collaborative assistant. Work out what the user actually needs, keeping the whole "
    "conversation in mind. When a request is ambiguous or misses a detail you need, ask a short, specific "
    "question instead of guessing. Offer concrete suggestions and next steps, keep answers focused and "
    "easy to read, and say so when you do not know something."
)


def rl_row(example: dict[str, Any], data_source: str, task_desc: str) -> dict[str, Any]:
    if not example.get("prompt") or not example.get("single_turn_prompt"):
        raise ValueError(
            f"a CollabLLM row needs 'prompt' and 'single_turn_prompt'; got fields {sorted(example)}"
        )
    prompt = [{"role": "system", "content": SYSTEM_PROMPT}] + [dict(m) for m in example["prompt"]]
    ground_truth = example.get("single_turn_completion") or example.get("completion") or ""
    extra = {k: v for k, v in example.items() if k not in ("prompt", "single_turn_prompt", "task_desc")}
    extra["prompt"] = prompt
    extra["interaction_kwargs"] = {
        "name": "collabllm",
        "single_turn_prompt": example["single_turn_prompt"],
        "task_desc": example.get("task_desc") or task_desc,
    }
    return {
        "data_source": data_source,
        "prompt": prompt,
        "ability": "collaboration",
        "reward_model": {"style": "rule", "ground_truth": ground_truth},
        "agent_name": "collabllm_agent",
        "extra_info": extra,
    }


def rl_rows(examples: list[dict[str, Any]], data_source: str, task_desc: str) -> list[dict[str, Any]]:
    """RL rows, one per distinct prompt (the first row of each)."""
    seen: set[str] = set()
    out = []
    for ex in examples:
        key = json.dumps(ex.get("prompt"), sort_keys=True, ensure_ascii=False)
        if key not in seen:
            seen.add(key)
            out.append(rl_row(ex, data_source, task_desc))
    return out


def sft_rows(examples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One SFT conversation per ``conv_id``: its last turn (highest ``turn_id``; ties: highest ``score``)."""
    best: dict[Any, dict[str, Any]] = {}
    for ex in examples:
        cid = ex["conv_id"]
        rank = (ex.get("turn_id", 0), ex.get("score") or 0.0)
        if cid not in best or rank > (best[cid].get("turn_id", 0), best[cid].get("score") or 0.0):
            best[cid] = ex
    return [
        {
            "messages": [{"role": "system", "content": SYSTEM_PROMPT}]
            + [dict(m) for m in ex["prompt"]]
            + [{"role": "assistant", "content": ex["completion"]}]
        }
        for ex in best.values()
    ]


def split_rows(rows: list[dict], validation_size: float, seed: int) -> tuple[list[dict], list[dict]]:
    """Shuffle (seeded) and cut: ``validation_size`` < 1 is a fraction, else a row count."""
    rows = list(rows)
    random.Random(seed).shuffle(rows)
    n_val = int(round(len(rows) * validation_size)) if validation_size < 1 else int(validation_size)
    if not 0 < n_val < len(rows):
        raise ValueError(
            f"validation_size={validation_size} gives {n_val} of {len(rows)} rows; need 1..{len(rows) - 1}"
        )
    return rows[n_val:], rows[:n_val]


def main(argv: list[str] | None = None) -> dict[str, Path]:
    from verl.utils.dataset import write_parquet
    from verl.utils.dataset.rows import read_rows

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--input", required=True, nargs="+", help="parquet/jsonl export(s) of a CollabLLM multiturn dataset"
    )
    ap.add_argument("--out_dir", required=True)
    ap.add_argument("--dataset_type", default="rl", choices=["rl", "sft"])
    ap.add_argument("--data_source", default="lighteval/MATH", help="routes the accuracy metric to a scorer")
    ap.add_argument("--task_desc", default="solving math problems")
    ap.add_argument("--validation_size", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=42)
    args = ap.parse_args(argv)
    examples = [dict(row) for path in args.input for _, row in read_rows(path)]
    if args.dataset_type == "rl":
        rows = rl_rows(examples, args.data_source, args.task_desc)
    else:
        rows = sft_rows(examples)
    train, val = split_rows(rows, args.validation_size, args.seed)
    out = Path(args.out_dir)
    paths = {
        "train": write_parquet(train, out / f"{args.dataset_type}_train.parquet"),
        "validation": write_parquet(val, out / f"{args.dataset_type}_validation.parquet"),
    }
    print(f"{len(train)} train and {len(val)} validation {args.dataset_type} rows in {out}", flush=True)
    return paths


if __name__ == "__main__":
    main()
