"""What the CPU default needs and a fresh clone does not have: a multi-step task and a warm-started model.

The task: chained single-digit sums shown step by step. The prompt ``3+5+8=`` asks for the running sums
``8,16``; verl-rewards' exact-match ``arithmetic`` scorer gives 1 only when every step is right (a wrong
first sum makes the whole answer wrong), so the outcome reward is sparse and says nothing about *which*
step failed: the case the implicit PRM's per-token rewards are for. All 1000 problems ``a+b+c=`` (digits
0-9) are split by a fixed hash (core's ``arithmetic_split`` rule: one in ten is held out).

The model: core's demo Qwen2 (``verl.trainer.demo.MODEL_SIZES``, about 450k parameters, character
tokenizer) briefly fine-tuned in process (plain torch) on the train split's answers, so it samples a
fully right answer about one time in ten: RL from a random model never sees a reward, and a model that
already knows the task has nothing to learn. The same weights start the policy and the PRM.

When the config leaves ``data.train_files`` or ``actor_rollout_ref.model.path`` unset, `built_in` writes
them under ``{trainer.default_local_dir}/assets`` (reused when there; core's ``recipe_assets``) and
returns the ``key=value`` overrides that point the config at them.
"""

from __future__ import annotations

import json
import zlib
from pathlib import Path

from omegaconf import DictConfig
from verl.trainer.recipe_assets import BuiltIn, task_and_model

NUMBERS = 3  # operands per problem: NUMBERS - 1 steps
TEST_BUCKETS = 10  # one problem in TEST_BUCKETS (by a fixed hash) is held out
DATA_SOURCE = "arithmetic"  # verl-rewards' exact-match scorer
WARM_START_STEPS = 180
WARM_START_BATCH = 64
WARM_START_LR = 3e-3
SEED = 0
WARM_START_MARKER = "warm_start.json"


def chain_problem(digits: tuple[int, ...]) -> tuple[str, str]:
    """``(prompt, answer)``: ``"3+5+8="`` and its running sums ``"8,16"``."""
    sums, total = [], digits[0]
    for d in digits[1:]:
        total += d
        sums.append(str(total))
    return "+".join(map(str, digits)) + "=", ",".join(sums)


def split_of(prompt: str) -> str:
    return "test" if zlib.crc32(prompt.encode()) % TEST_BUCKETS == 0 else "train"


def task_rows(split: str) -> list[dict]:
    """Every problem of ``split`` in the RL row contract (``data_source="arithmetic"``)."""
    import itertools

    rows = []
    for digits in itertools.product(range(10), repeat=NUMBERS):
        prompt, answer = chain_problem(digits)
        if split_of(prompt) != split:
            continue
        rows.append({
            "data_source": DATA_SOURCE,
            "prompt": [{"role": "user", "content": prompt}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": answer},
            "extra_info": {"split": split, "index": len(rows)},
        })  # fmt: skip
    return rows


def write_task(out_dir: Path) -> tuple[Path, Path]:
    """Train and test parquet files (the same rows every time)."""
    from verl.utils.dataset import write_parquet

    return (
        write_parquet(task_rows("train"), out_dir / "train.parquet"),
        write_parquet(task_rows("test"), out_dir / "test.parquet"),
    )


def warm_start_tiny_model(out_dir: Path, train_file: Path, steps: int | None = None) -> Path:
    """Build the demo's tiny Qwen2 and fine-tune it in process on the train split's answers.

    Loss on the answer tokens and EOS only, prompts rendered with the tokenizer's chat template exactly as
    the RL dataset renders them; AdamW, ``WARM_START_LR`` after a 10-step linear warm-up, batches of
    ``WARM_START_BATCH`` problems drawn with a fixed seed, ``steps`` (default ``WARM_START_STEPS``) times.
    Saves model + tokenizer to ``out_dir``.
    """
    import pyarrow.parquet as pq
    import torch
    from transformers import AutoModelForCausalLM
    from verl.trainer.demo import build_model
    from verl.workers.tiny import answer_examples, fine_tune_on_answers
    from verl.workers.tokenizer import hf_tokenizer

    steps = WARM_START_STEPS if steps is None else int(steps)
    build_model(out_dir)
    tok = hf_tokenizer(str(out_dir))
    model = AutoModelForCausalLM.from_pretrained(str(out_dir), dtype=torch.float32)
    examples = answer_examples(tok, pq.read_table(train_file).to_pylist())
    loss = fine_tune_on_answers(model, examples, steps, WARM_START_BATCH, WARM_START_LR, tok.pad_token_id,
                                seed=SEED, weight_decay=0.0, warmup_steps=10)  # fmt: skip
    model.save_pretrained(str(out_dir))
    (out_dir / WARM_START_MARKER).write_text(json.dumps({"steps": steps, "final_loss": loss}))
    return out_dir


def built_in(cfg: DictConfig, built: BuiltIn) -> list[str]:
    """``key=value`` overrides for the unset data files / model path, creating the assets on first use
    (the warm start's record is written last: a cut-short build is redone)."""
    return task_and_model(cfg, built.root, write_task, warm_start_tiny_model, done=WARM_START_MARKER)
