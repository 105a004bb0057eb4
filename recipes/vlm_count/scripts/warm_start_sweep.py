"""Held-out accuracy of the SFT warm start by step (the numbers behind WARM_START_STEPS in the README).

    uv run --package verl-recipe-vlm-count python recipes/vlm_count/scripts/warm_start_sweep.py LR STEPS EVERY OUT_DIR

Same model, data, seeds, batch and optimizer as ``cpu_assets.warm_start``; every EVERY steps prints the
loss, the greedy held-out accuracy (first response token = the answer digit, 128 rows of TEST_SEED) and
the mean probability of the right digit (what sampling at temperature 1 starts from).
"""

import sys
import time
from pathlib import Path

import torch
import verl_recipe_vlm_count.cpu_assets as A
from transformers import AutoModelForImageTextToText
from verl.utils.dataset.vision import build_vl_messages, load_image
from verl.workers.tiny_vlm import build_tiny_qwen2_vl
from verl.workers.tokenizer import hf_processor

lr, max_steps, every, out = float(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4])
build_tiny_qwen2_vl(out, seed=0)
proc = hf_processor(str(out))
tok = proc.tokenizer
model = AutoModelForImageTextToText.from_pretrained(str(out), dtype=torch.float32)


def encode(rows, with_answers):
    texts, images = [], []
    for r in rows:
        prompt = proc.apply_chat_template(
            build_vl_messages(r["prompt"], 1, "sweep"), add_generation_prompt=True, tokenize=False
        )
        texts.append(prompt + (r["reward_model"]["ground_truth"] + tok.eos_token if with_answers else ""))
        images.append(load_image(r["images"][0], "sweep"))
    return proc(text=texts, images=images, return_tensors="pt", padding=True)


train = encode(A.task_rows(A.TRAIN_ROWS, A.TRAIN_SEED, "train"), True)
test_rows = A.task_rows(A.TEST_ROWS, A.TEST_SEED, "test")
test = encode(test_rows, False)
digit_ids = torch.tensor([tok.convert_tokens_to_ids(str(d)) for d in range(10)])
answers = torch.tensor([int(r["reward_model"]["ground_truth"]) for r in test_rows])


def evaluate():
    model.eval()
    with torch.no_grad():
        logits = model(**test).logits[:, -1].float()
    model.train()
    correct_ids = digit_ids[answers]
    acc = (logits.argmax(-1) == correct_ids).float().mean()
    p_right = torch.softmax(logits, -1)[torch.arange(len(answers)), correct_ids].mean()
    return round(float(acc), 4), round(float(p_right), 3)


n = train["input_ids"].shape[0]
per_image = int(train["image_grid_thw"][0].prod())
pixels = train["pixel_values"].view(n, per_image, -1)
torch.manual_seed(0)
opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
gen = torch.Generator().manual_seed(0)
model.train()
t0 = time.time()
for step in range(1, max_steps + 1):
    loss = A.answer_loss(model, train, pixels, torch.randperm(n, generator=gen)[: A.WARM_START_BATCH])
    loss.backward()
    opt.step()
    opt.zero_grad()
    if step % every == 0:
        acc, p_right = evaluate()
        print(
            f"step {step} loss {loss.item():.3f} held-out greedy {acc} p(right digit) {p_right} ({time.time() - t0:.0f} s)",
            flush=True,
        )
