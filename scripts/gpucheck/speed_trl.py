"""TRL's ``GRPOTrainer`` for a speed cell (TRL's public API; ``model.generate``, no vLLM).

The same settings as ours (``speed_common``): 8 prompts x 8 generations = 64 completions per optimizer
step, ``micro_rows`` per forward/backward with gradient accumulation over the rest, completions of
exactly ``length`` tokens (``min_new_tokens``), bf16 autocast over fp32 weights on CUDA (``bf16=True``),
beta 0, constant LR. A callback times each optimizer step (the device synchronized at its ends);
``model.generate`` is wrapped to time generation inside it, and a hook on the first layer's ``q_proj``
records the dtypes its matmuls produced (bf16 when accelerate's autocast reaches generation too).

    python speed_trl.py --cell JSON --json OUT --deadline T
"""

from __future__ import annotations

import gc
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from context import peak_memory_gib, reset_peak_memory, synchronize  # noqa: E402
from speed_common import LR, PROMPTS, SAMPLES, WEIGHT_DECAY, Cell, Results, parse, run_lengths  # noqa: E402


def run_length(cell: Cell, length: int, steps: int, model, tokenizer, dataset, work: Path) -> dict:
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    device = cell.device
    micro = cell.micro_rows[length]
    clock = {"gen": 0.0, "t": 0.0}
    records: list[dict] = []
    plain_generate = model.generate

    seen_dtypes: set[str] = set()
    generating = [False]

    def note_dtype(module, inputs, output):
        if generating[0]:
            seen_dtypes.add(str(output.dtype).removeprefix("torch."))

    # what dtype generation's matmuls run in (bf16 when accelerate's autocast reaches generate too)
    hook = model.model.layers[0].self_attn.q_proj.register_forward_hook(note_dtype)

    def timed_generate(*args, **kwargs):
        synchronize(device)
        t0 = time.perf_counter()
        generating[0] = True
        try:
            out = plain_generate(*args, **kwargs)
        finally:
            generating[0] = False
        synchronize(device)
        clock["gen"] += time.perf_counter() - t0
        return out

    class StepClock(TrainerCallback):
        def on_train_begin(self, args, state, control, **kw):
            synchronize(device)
            clock["t"], clock["gen"] = time.perf_counter(), 0.0

        def on_step_end(self, args, state, control, **kw):
            synchronize(device)
            now = time.perf_counter()
            records.append({"step_s": now - clock["t"], "gen_s": clock["gen"]})
            clock["t"], clock["gen"] = now, 0.0

    def fixed_reward(prompts, completions, completion_ids, **kwargs):
        records_tokens.append(sum(len(ids) for ids in completion_ids))
        return [0.0] * len(completions)

    records_tokens: list[int] = []
    reset_peak_memory(device)
    t0 = time.perf_counter()
    cfg = GRPOConfig(
        output_dir=str(work / f"trl_{cell.shape}_{length}"), max_steps=steps,
        per_device_train_batch_size=micro, gradient_accumulation_steps=PROMPTS * SAMPLES // micro,
        num_generations=SAMPLES, max_completion_length=length, generation_kwargs={"min_new_tokens": length},
        temperature=1.0, learning_rate=LR, lr_scheduler_type="constant", warmup_steps=0, weight_decay=WEIGHT_DECAY,
        max_grad_norm=1.0, beta=0.0, bf16=cell.dtype == "bfloat16", use_cpu=device == "cpu", use_vllm=False,
        gradient_checkpointing=False, report_to="none", save_strategy="no", logging_steps=1, disable_tqdm=True,
        seed=0, dataloader_num_workers=0,
    )
    model.generate = timed_generate
    try:
        trainer = GRPOTrainer(model=model, reward_funcs=[fixed_reward], args=cfg, train_dataset=dataset,
                              processing_class=tokenizer, callbacks=[StepClock()])
        setup = time.perf_counter() - t0
        trainer.train()
    finally:
        model.generate = plain_generate
        hook.remove()
    memory = peak_memory_gib(device)
    del trainer
    gc.collect()
    out_steps = [{**r, "response_tokens": tokens} for r, tokens in zip(records, records_tokens)]
    return {"length": length, "micro_rows": micro, "setup_s": round(setup, 2), "steps": out_steps,
            "generation_q_proj_dtypes": sorted(seen_dtypes), **memory}


def main() -> None:
    import torch
    import trl
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer

    cell, out, deadline = parse(__doc__)
    results = Results(out, cell, "trl", trl=trl.__version__)
    tokenizer = AutoTokenizer.from_pretrained(cell.model_dir)
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(cell.model_dir, dtype=torch.float32).to(cell.device)
    import pyarrow.parquet as pq

    texts = [row[0]["content"] for row in pq.read_table(cell.data_file).column("prompt").to_pylist()]
    dataset = Dataset.from_list([{"prompt": t} for t in texts])
    run_lengths(cell, deadline, results,
                lambda length, steps: run_length(cell, length, steps, model, tokenizer, dataset, out.parent))


if __name__ == "__main__":
    main()
