"""The CPU default's task and model: count the red squares, on a tiny Qwen2-VL warm-started in process.

The task: a 56x56 image is a 2x2 grid of 28-pixel cells (one merged Qwen2-VL vision token per cell);
each cell is empty, a red square or a blue square. The prompt ``<image>How many red?`` asks for the
number of red squares (1..4), scored by exact match (verl-rewards' ``arithmetic`` scorer: the stripped
response must equal the digit). Images are drawn with PIL from a seeded generator and stored as PNG bytes
in parquet (upstream's ``images: [{"bytes": ...}]`` row contract); the held-out split uses another seed.

The model: :func:`verl.workers.tiny_vlm.build_tiny_qwen2_vl` (about 160k parameters) fine-tuned in
process (plain torch, the processor's batches) on answers of the train split for ``WARM_START_STEPS``
steps, so it starts above chance but far from solved: GRPO has something to learn and a reward to see.

When the config leaves ``data.train_files`` or ``actor_rollout_ref.model.path`` unset, `built_in` writes
them under ``{trainer.default_local_dir}/assets`` (reused when there; core's ``recipe_assets``).
"""

from __future__ import annotations

import io
import json
import random
from pathlib import Path

from omegaconf import DictConfig
from verl.trainer.recipe_assets import BuiltIn, task_and_model

CELL = 28
GRID = 2
MAX_COUNT = 4
PROMPT = "<image>How many red?"
DATA_SOURCE = "arithmetic"  # verl-rewards' exact-match scorer
TRAIN_ROWS, TEST_ROWS = 512, 128
TRAIN_SEED, TEST_SEED = 0, 1
WARM_START_STEPS = 45
WARM_START_BATCH = 32
WARM_START_LR = 1e-3
MARKER = "warm_start.json"


def draw(cells: list[str]) -> bytes:
    """PNG bytes of the grid; ``cells`` holds 'red' / 'blue' / '' per cell, row by row."""
    from PIL import Image, ImageDraw

    im = Image.new("RGB", (GRID * CELL, GRID * CELL), (255, 255, 255))
    d = ImageDraw.Draw(im)
    for k, colour in enumerate(cells):
        if colour:
            x, y = (k % GRID) * CELL, (k // GRID) * CELL
            d.rectangle([x + 4, y + 4, x + CELL - 5, y + CELL - 5], fill=colour)
    buf = io.BytesIO()
    im.save(buf, format="PNG")
    return buf.getvalue()


def task_rows(n: int, seed: int, split: str) -> list[dict]:
    """``n`` problems in the RL row contract: 1..4 red squares, blue ones on some of the other cells."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        red = rng.randint(1, MAX_COUNT)
        blue = rng.randint(0, GRID * GRID - red)
        cells = ["red"] * red + ["blue"] * blue + [""] * (GRID * GRID - red - blue)
        rng.shuffle(cells)
        rows.append({
            "data_source": DATA_SOURCE,
            "prompt": [{"role": "user", "content": PROMPT}],
            "images": [{"bytes": draw(cells)}],
            "ability": "vision",
            "reward_model": {"style": "rule", "ground_truth": str(red)},
            "extra_info": {"split": split, "index": i},
        })  # fmt: skip
    return rows


def write_task(out_dir: Path) -> tuple[Path, Path]:
    from verl.utils.dataset import write_parquet

    return (
        write_parquet(task_rows(TRAIN_ROWS, TRAIN_SEED, "train"), out_dir / "train.parquet"),
        write_parquet(task_rows(TEST_ROWS, TEST_SEED, "test"), out_dir / "test.parquet"),
    )


def warm_start(out_dir: Path, rows: list[dict], steps: int | None = None) -> Path:
    """Build the tiny Qwen2-VL and fine-tune it on ``rows``' answers (loss on the digit and EOS only)."""
    import torch
    from transformers import AutoModelForImageTextToText
    from verl.utils.dataset.vision import build_vl_messages, load_image
    from verl.workers.tiny_vlm import build_tiny_qwen2_vl
    from verl.workers.tokenizer import hf_processor

    steps = WARM_START_STEPS if steps is None else int(steps)  # read at call time (tests shrink it)
    build_tiny_qwen2_vl(out_dir, seed=0)
    processor = hf_processor(str(out_dir))
    tok = processor.tokenizer
    model = AutoModelForImageTextToText.from_pretrained(str(out_dir), dtype=torch.float32)
    # Every image is 56x56 and every prompt the same template with a one-digit answer, so all examples
    # have the same length: the processor runs once over all of them and steps slice its output.
    texts, images = [], []
    for row in rows:
        msgs = build_vl_messages(row["prompt"], 1, "warm start")
        prompt = processor.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
        texts.append(prompt + row["reward_model"]["ground_truth"] + tok.eos_token)
        images.append(load_image(row["images"][0], "warm start"))
    full = processor(text=texts, images=images, return_tensors="pt", padding=True)
    if not bool(full["attention_mask"].all()):
        raise ValueError("warm-start examples differ in length; the task's prompts must share one template")
    per_image = int(full["image_grid_thw"][0].prod())
    pixels = full["pixel_values"].view(len(rows), per_image, -1)
    torch.manual_seed(0)
    opt = torch.optim.AdamW(model.parameters(), lr=WARM_START_LR, weight_decay=0.0)
    gen = torch.Generator().manual_seed(0)
    model.train()
    for _ in range(steps):
        loss = answer_loss(model, full, pixels, torch.randperm(len(rows), generator=gen)[:WARM_START_BATCH])
        loss.backward()
        opt.step()
        opt.zero_grad()
    model.save_pretrained(str(out_dir))
    (out_dir / MARKER).write_text(json.dumps({"steps": steps, "final_loss": float(loss.detach())}))
    return out_dir


def answer_loss(model, full, pixels, idx):
    """The warm start's loss on examples ``idx`` of the processor's batch ``full`` (``pixels``: its pixel
    values, one block per image): cross-entropy on the digit and EOS, the last two tokens."""
    import torch

    ids = full["input_ids"][idx]
    labels = torch.full_like(ids, -100)
    labels[:, -2:] = ids[:, -2:]
    return model(
        input_ids=ids, attention_mask=full["attention_mask"][idx], mm_token_type_ids=full["mm_token_type_ids"][idx],
        pixel_values=pixels[idx].flatten(0, 1), image_grid_thw=full["image_grid_thw"][idx], labels=labels,
    ).loss  # fmt: skip


def built_in(cfg: DictConfig, built: BuiltIn) -> list[str]:
    """``key=value`` overrides pointing an unset data/model config at the built-in task and model."""

    def build_model(out_dir: Path, _train: Path) -> Path:
        return warm_start(out_dir, task_rows(TRAIN_ROWS, TRAIN_SEED, "train"))

    return task_and_model(cfg, built.root, write_task, build_model, model_dir="model", done=MARKER)
