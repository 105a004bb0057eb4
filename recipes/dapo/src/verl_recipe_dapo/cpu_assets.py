"""What the CPU default needs and a fresh clone does not have: the task data and a warm-started tiny model.

When the config leaves ``data.train_files`` or ``actor_rollout_ref.model.path`` unset, `built_in` writes
them under ``{trainer.default_local_dir}/assets`` (reused when already there; core's
``recipe_assets.task_and_model``) and returns the ``key=value`` overrides that point the config at them:

- data: the built-in arithmetic task (single-digit ``+`` and ``-``; ``data_source="arithmetic"``,
  exact-match scorer from verl-rewards), train and test splits from ``verl.utils.dataset.tasks``;
- model: a tiny random-init Qwen2 (``verl.workers.tiny``) briefly fine-tuned on a few worked answers,
  so its first rollouts are right sometimes (a random model never is, and RL then has no signal).
  The warm start is deliberately short: the policy starts around 15-20 % right, so most
  groups of 8 have mixed outcomes and the rest are dropped by dynamic sampling.
"""

from __future__ import annotations

import random
from pathlib import Path

from omegaconf import DictConfig
from verl.trainer.recipe_assets import BuiltIn, task_and_model

OPS = ("+", "-")
TRAIN_PER_OP = 40
TEST_PER_OP = 4
WARM_START_STEPS = 150
WARM_START_EXAMPLES = 80  # all train problems, briefly: the policy starts around 15 % right
SEED = 0


def write_task(out_dir: Path) -> tuple[Path, Path]:
    """Train/test parquet files of the arithmetic task (same rows for the same constants)."""
    from verl.utils.dataset import write_parquet
    from verl.utils.dataset.tasks import make_arithmetic_rows

    splits = {}
    for split, per_op in (("train", TRAIN_PER_OP), ("test", TEST_PER_OP)):
        rows = [
            r for op in OPS for r in make_arithmetic_rows(per_op, seed=SEED, digits=1, op=op, split=split)
        ]
        random.Random(SEED).shuffle(rows)
        splits[split] = write_parquet(rows, out_dir / f"{split}.parquet")
    return splits["train"], splits["test"]


def warm_start_tiny_model(out_dir: Path, train_file: Path) -> Path:
    """Build the tiny Qwen2 and fine-tune it (plain torch, in process) on ``WARM_START_EXAMPLES`` answers.

    Loss on the answer tokens and EOS only, prompts rendered with the tokenizer's chat template exactly
    as the RL dataset renders them. Saves model + tokenizer to ``out_dir`` with ``save_pretrained``.
    """
    import pyarrow.parquet as pq
    from verl.workers.tiny import answer_examples, build_tiny_qwen2, fine_tune_on_answers
    from verl.workers.tokenizer import hf_tokenizer

    model = build_tiny_qwen2(out_dir, size="xs", seed=SEED)
    tok = hf_tokenizer(str(out_dir))
    examples = answer_examples(tok, pq.read_table(train_file).to_pylist()[:WARM_START_EXAMPLES])
    fine_tune_on_answers(model, examples, WARM_START_STEPS, 16, 3e-3, tok.pad_token_id, seed=SEED)
    model.save_pretrained(str(out_dir))
    return out_dir


def built_in(cfg: DictConfig, built: BuiltIn) -> list[str]:
    """``key=value`` overrides for the unset data files / model path, creating the assets on first use."""
    return task_and_model(cfg, built.root, write_task, warm_start_tiny_model)
