"""A task whose answers vary in length, so that streaming and partial rollouts have a tail to cut:
``count 7..19`` -> ``7,8,9,10,11,12,13,14,15,16,17,18,19`` (start 0..29, 1 to 16 numbers: answers of 1 to
47 characters, one token each with the tiny model's character tokenizer). Scored by core's built-in
``arithmetic`` scorer (exact match of the whole answer); held-out problems are disjoint from training
(a stable hash of the problem, as core's arithmetic split). Rows follow the RL row contract.

`write_count_task` writes train/test parquet files and the SFT conversations; `warm_start` fine-tunes
core's tiny Qwen2 on them with core's SFT trainer (so RL starts with some signal).
"""

from __future__ import annotations

import zlib
from pathlib import Path

MAX_START, MAX_COUNT = 29, 16
RESPONSE_LENGTH = 48  # the longest answer (47 characters) and its end of sequence
PROMPT_LENGTH = 48


def answer(start: int, count: int) -> str:
    return ",".join(str(i) for i in range(start, start + count))


def split_of(start: int, count: int) -> str:
    return "test" if zlib.crc32(f"count{start}..{count}".encode()) % 8 == 0 else "train"


def count_rows(split: str) -> list[dict]:
    rows = []
    for start in range(MAX_START + 1):
        for count in range(1, MAX_COUNT + 1):
            if split_of(start, count) != split:
                continue
            rows.append(
                {
                    "data_source": "arithmetic",  # core's exact-match scorer
                    "prompt": [{"role": "user", "content": f"count {start}..{start + count - 1}"}],
                    "ability": "counting",
                    "reward_model": {"style": "rule", "ground_truth": answer(start, count)},
                    "extra_info": {"split": split, "index": len(rows), "count": count},
                }
            )
    return rows


def write_count_task(data_dir: Path) -> dict[str, str]:
    from verl.utils.dataset.rows import write_parquet

    train, test = count_rows("train"), count_rows("test")
    sft = [
        {"messages": r["prompt"] + [{"role": "assistant", "content": r["reward_model"]["ground_truth"]}]}
        for r in train
    ]
    return {
        "train": str(write_parquet(train, data_dir / "train.parquet")),
        "test": str(write_parquet(test, data_dir / "test.parquet")),
        "sft": str(write_parquet(sft, data_dir / "sft_train.parquet")),
    }


def warm_start(root: Path, data: dict[str, str], steps: int, workers: int = 2) -> str:
    """Core's tiny Qwen2 after ``steps`` SFT steps on the training answers; returns the HF folder."""
    from verl.trainer.demo import build_model, sft_args
    from verl.trainer.sft import load_sft_config, validate_sft_config
    from verl.trainer.sft_trainer import run_sft

    base = build_model(root / "base_model")
    if steps <= 0:
        return base
    args = sft_args(base, data, root / "sft", steps, workers)
    args = [a for a in args if not a.startswith("data.max_length=")] + [
        f"data.max_length={PROMPT_LENGTH + RESPONSE_LENGTH}",
        "trainer.logger=[jsonl]",
    ]
    cfg = load_sft_config(args)
    validate_sft_config(cfg)
    return run_sft(cfg)["hf_model"]


__all__ = ["PROMPT_LENGTH", "RESPONSE_LENGTH", "count_rows", "warm_start", "write_count_task"]
