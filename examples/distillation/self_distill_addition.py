"""On-policy self-distillation on CPU: the teacher is the student's own start, shown the answer.

    uv run python examples/distillation/self_distill_addition.py --out DIR [--variant opsd] [--steps 40]

The student (the demo model's size) is warm-started on the addition task with SFT conversations of two
kinds: the plain problem, and the problem after a system turn that states the answer
(``answer: 19``), so the model learns to use such a hint when it has one. Then, through ``main_ppo``:

    opsd   the teacher is that same warm start, frozen, and sees the ground truth as privileged context:
           ``privileged_context.key=reward_model.ground_truth`` with the system turn as the template,
           placed before the prompt; the student (no hint) learns its token distributions on-policy
           (forward KL over the teacher's top-k, no task reward)
    grpo   the baseline: GRPO on the exact-match reward from the same start, the same samples per step

Outputs under ``DIR``: ``assets/`` (data, warm start; reused), ``<variant>/metrics.jsonl`` with the held-out
greedy exact match every ``--test-freq`` steps.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the sibling opd_addition module

import argparse  # noqa: E402
import json  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

from opd_addition import STUDENT_MODEL, _sft, add_run_options, run_main_ppo, run_options  # noqa: E402

# the chat template's rendering of a system turn: the student's prompt starts with the user turn, so the
# teacher's prompt (this, then the student's) is exactly the template's rendering of [system, user]
HINT = "answer: {solution}"
TEMPLATE = "<|im_start|>system\n" + HINT + "<|im_end|>\n"


def build_assets(root: str | os.PathLike, sft_steps: int, workers: int = 2, seed: int = 1) -> dict[str, Any]:
    from verl.trainer.demo import addition_rows, write_data
    from verl.trainer.model_builders import MODEL_BUILDERS
    from verl.utils.dataset.rows import write_parquet

    root = Path(root).absolute()
    record = root / "assets.json"
    if record.is_file():
        done = json.loads(record.read_text())
        if (done.get("sft_steps"), done.get("seed")) == (sft_steps, seed) and Path(done["student"]).exists():
            return done
    data = write_data(root / "data")
    plain = [r["prompt"] + [{"role": "assistant", "content": r["reward_model"]["ground_truth"]}]
             for r in addition_rows("train")]  # the demo's SFT conversations
    hinted = [[{"role": "system", "content": HINT.replace("{solution}", m[-1]["content"])}, *m] for m in plain]
    data["sft_hinted"] = str(write_parquet([{"messages": list(m)} for m in [*plain, *hinted]],
                                           root / "data" / "sft_hinted.parquet"))
    base = MODEL_BUILDERS.get("tiny_qwen2")(root / "student_base", **STUDENT_MODEL)
    print(f"[opsd] warm start: {sft_steps} SFT steps on plain and hinted conversations", flush=True)
    out = {"sft_steps": sft_steps, "seed": seed, "train": data["train"], "test": data["test"],
           "student": _sft(base, data, root / "sft", sft_steps, workers, seed, files="sft_hinted")}
    record.write_text(json.dumps(out, indent=2))
    return out


def run_args(variant: str, assets: dict, out: Path, steps: int, workers: int, prompts: int, n: int,
             test_freq: int, lr: float, seed: int) -> list[str]:
    from opd_addition import run_args as base_args

    args = base_args("grpo", assets, out, steps, workers, prompts, n, test_freq, lr, seed)
    args.append(f"trainer.experiment_name=opsd_{variant}")
    if variant == "grpo":
        return args
    t = "distillation.teacher_models.teacher_model"
    return args + [
        "distillation.enabled=true", "distillation.nnodes=1", "distillation.n_gpus_per_node=1",
        f"{t}.model_path={assets['student']}", f"{t}.inference.name=hf", f"{t}.inference.dtype=float32",
        f"{t}.inference.tensor_model_parallel_size=1",
        f"{t}.privileged_context.key=reward_model.ground_truth", f"{t}.privileged_context.position=before_prompt",
        f"{t}.privileged_context.template='{TEMPLATE}'",  # quoted (override grammar): newlines kept as they are
        "distillation.distillation_loss.loss_mode=forward_kl_topk", "distillation.distillation_loss.use_task_rewards=false",
    ]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--variant", default="opsd", choices=["opsd", "grpo"])
    p.add_argument("--sft-steps", type=int, default=150)
    add_run_options(p)
    args = p.parse_args(argv)
    out = Path(args.out).absolute()
    assets = build_assets(out / "assets", args.sft_steps, args.workers, args.seed)
    result = {"variant": args.variant,
              **run_main_ppo(run_args(args.variant, assets, out / args.variant, **run_options(args)), out / args.variant)}
    print(json.dumps(result), flush=True)
    return result


if __name__ == "__main__":
    main()
