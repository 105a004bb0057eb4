"""TRL's GRPOTrainer as a step server, for the GRPO-step benchmark (TRL's public API only).

Runs under a Python that has TRL: by default the workspace's own interpreter (the dev group pins
``trl``), so TRL runs on exactly the torch build ours does; it imports nothing from this project but
``machine.torch_build`` (beside it), so another venv works too. Settings match the TRL anchor (``/work/shared/anchors/trl_anchor/grpo_trl.py``): 8 prompts x
8 generations = 64 completions per optimizer step, one micro-batch of 64 (no accumulation; or
``--micro-batch`` rows per forward/backward with ``64 / micro-batch`` accumulation steps, TRL's
generation batch staying 64), one generation per step, temperature 1, AdamW at a constant LR, grad clip 1.0, fp32
(``--dtype bf16``: ``bf16=True``, accelerate's bf16 autocast over the fp32 weights), beta 0 (no KL),
no gradient checkpointing, ``model.generate`` (no vLLM). Completions have exactly
``--new-tokens`` tokens (``min_new_tokens`` = max), as in the other two steps.

Protocol (shared with ``bare.py --serve``): prints ``READY {json}`` once, then for every ``step``
line on stdin lets the trainer run exactly one optimizer step and prints ``RESULT {json}``; a
``quit`` line ends the process. The trainer waits inside a callback between steps, so the timed
interval runs from the command to the end of the step (data, generation, reward, loss, backward,
optimizer, the trainer's own bookkeeping) and nothing else runs while the other steps are timed.

    /work/venv-trl/bin/python benchmarks/grpo_step/trl_driver.py --model DIR --new-tokens 16
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import sys
import time
from pathlib import Path


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def wait_for_command() -> None:
    """Block until the harness says ``step``; leave the process on ``quit`` or end of input."""
    line = sys.stdin.readline()
    cmd = line.strip()
    if cmd == "step":
        return
    if cmd in ("quit", ""):
        sys.stdout.flush()
        os._exit(0)  # the trainer is mid-loop; nothing to save
    raise SystemExit(f"trl_driver.py: unknown command {cmd!r}; expected 'step' or 'quit'")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="model folder (benchmarks/grpo_step/assets.py)")
    ap.add_argument("--new-tokens", type=int, required=True)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0 = torch's default)")
    ap.add_argument(
        "--micro-batch", type=int, default=64, help="rows per forward/backward (64: no accumulation)"
    )
    ap.add_argument("--workdir", default="/tmp/grpo_step_trl_out")
    ap.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"], help="bf16: GRPOConfig(bf16=True)")
    args = ap.parse_args()

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if 64 % args.micro_batch or args.micro_batch % 8:
        raise SystemExit(
            f"--micro-batch {args.micro_batch}: must divide 64 and be a multiple of 8 generations"
        )
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    import trl
    from datasets import Dataset
    from machine import torch_build
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    tokenizer = AutoTokenizer.from_pretrained(args.model)
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    # the dtype the first layer's q projection produces in generation (no autograd) and in the update
    seen: dict[str, set[str]] = {"gen": set(), "update": set()}
    model.model.layers[0].self_attn.q_proj.register_forward_hook(
        lambda m, i, out: seen["update" if torch.is_grad_enabled() else "gen"].add(str(out.dtype)[6:])
    )
    problems = json.loads((Path(args.model) / "prompts.json").read_text())
    random.Random(args.seed).shuffle(problems)
    dataset = Dataset.from_list([{"prompt": p, "answer": a} for p, a in problems])

    last: dict = {}

    def exact_match(prompts, completions, answer, **kwargs):
        scores = [float(c.strip() == a) for c, a in zip(completions, answer)]
        ids = kwargs.get("completion_ids")
        last["gen_tokens"] = sum(len(x) for x in ids) if ids is not None else float("nan")
        last["reward"] = sum(scores) / len(scores)
        return scores

    class StepGate(TrainerCallback):
        """Holds the trainer between steps and reports each step's wall time."""

        def __init__(self) -> None:
            self.t0 = self.c0 = 0.0

        def on_train_begin(self, a, state, control, **kw):
            print(
                "READY "
                + json.dumps(
                    {
                        "impl": "trl",
                        "trl": trl.__version__,
                        "torch": torch.__version__,
                        "threads": torch.get_num_threads(),
                        "params": sum(p.numel() for p in model.parameters()),
                        "micro_batch": args.micro_batch,
                        "torch_build": torch_build(),
                        "dtype": args.dtype,
                    }
                ),
                flush=True,
            )
            wait_for_command()
            self.t0, self.c0 = time.perf_counter(), time.process_time()

        def on_step_end(self, a, state, control, **kw):
            dt, cpu = time.perf_counter() - self.t0, time.process_time() - self.c0
            print(
                "RESULT "
                + json.dumps(
                    {
                        "step_s": dt,
                        "cpu_s": cpu,
                        **last,
                        "peak_rss_mib": peak_rss_mib(),
                        "matmul_dtypes": {k: sorted(v) for k, v in seen.items()},
                    }
                ),
                flush=True,
            )
            wait_for_command()
            self.t0, self.c0 = time.perf_counter(), time.process_time()

    cfg = GRPOConfig(
        output_dir=args.workdir,
        max_steps=1_000_000,  # the harness decides when to stop
        per_device_train_batch_size=args.micro_batch,
        # steps_per_generation defaults to this: one generation of 64 completions per optimizer step
        gradient_accumulation_steps=64 // args.micro_batch,
        num_generations=8,
        max_completion_length=args.new_tokens,
        generation_kwargs={"min_new_tokens": args.new_tokens},
        temperature=1.0,
        learning_rate=args.lr,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.01,
        max_grad_norm=1.0,
        beta=0.0,
        bf16=args.dtype == "bf16",
        fp16=False,
        use_cpu=True,
        use_vllm=False,
        gradient_checkpointing=False,
        report_to="none",
        push_to_hub=False,
        save_strategy="no",
        logging_steps=10,
        disable_tqdm=True,
        seed=args.seed,
        dataloader_num_workers=0,
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[exact_match],
        args=cfg,
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=[StepGate()],
    )
    trainer.train()


if __name__ == "__main__":
    main()
