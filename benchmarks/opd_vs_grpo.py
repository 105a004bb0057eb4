"""On-policy distillation (each loss variant) against GRPO from the same student start, equal samples.

    uv run python benchmarks/opd_vs_grpo.py --out DIR [--steps 40] [--variants grpo,k3,...] [--self-distill]

The task, models and variants are ``examples/distillation/opd_addition.py``'s: a teacher of the tiny ``s``
size warm-started longer, a student of the demo model's size warm-started briefly, then every variant from that
student for ``--steps`` steps of ``--prompts`` x ``--n`` trajectories, validated greedily on the held-out
problems every ``--test-freq`` steps. The teacher's own held-out accuracy (``trainer.val_only`` through
``main_ppo``) is the ceiling the distilled variants aim at. With ``--self-distill`` the pair of
``self_distill_addition.py`` (on-policy self-distillation with the answer as privileged context, and
GRPO from that warm start) runs too. Each finished run is appended to ``DIR/results.jsonl`` (a rerun
skips the ones there); the table goes to stdout and ``DIR/opd_vs_grpo.md``. Wall times are of this
machine at the time: compare them only within one table.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "distillation")
sys.path.insert(0, EXAMPLES)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import argparse  # noqa: E402
import json  # noqa: E402
from pathlib import Path  # noqa: E402

import opd_addition  # noqa: E402
import self_distill_addition  # noqa: E402
from md_table import markdown_table  # noqa: E402


def model_accuracy(model: str, assets: dict, out: Path, workers: int) -> float:
    """Held-out greedy exact match of ``model`` (validation only, through main_ppo)."""
    from verl.trainer.config import load_config, validate_config
    from verl.trainer.main_ppo import run_ppo

    args = opd_addition.run_args("grpo", {**assets, "student": model}, out, 1, workers, 16, 2, 1, 1e-4, 1)
    cfg = load_config(args + ["trainer.val_only=true", "trainer.val_before_train=true"])
    validate_config(cfg)
    return float(run_ppo(cfg)["val/arithmetic/reward"])


def table(results: list[dict]) -> str:
    """Held-out exact match per validation step, the best, wall time (start-up and validation included)
    and the median time of a training step without validation."""
    checkpoints = sorted({s for r in results for s, _ in r["val_curve"]})
    cols = ["run", *[f"step {s}" for s in checkpoints], "best", "wall time", "s / training step (median)"]
    rows = []
    for r in results:
        curve = dict(r["val_curve"])
        rows.append([r["name"], *[f"{100 * curve[s]:.1f}%" if s in curve else "" for s in checkpoints],
                     f"{100 * max(curve.values()):.1f}%" if curve else "", f"{r['seconds']:.0f} s",
                     f"{r['step_seconds']:.1f}"])
    return markdown_table(cols, rows)


def main(argv: list[str] | None = None) -> str:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--variants", default=",".join(opd_addition.VARIANTS))
    p.add_argument("--self-distill", action="store_true")
    p.add_argument("--teacher-sft-steps", type=int, default=400)
    p.add_argument("--student-sft-steps", type=int, default=150)
    p.add_argument("--self-distill-sft-steps", type=int, default=150)
    opd_addition.add_run_options(p)
    args = p.parse_args(argv)
    out = Path(args.out).absolute()
    out.mkdir(parents=True, exist_ok=True)
    done_file = out / "results.jsonl"
    done = {r["name"]: r for r in map(json.loads, done_file.read_text().splitlines())} if done_file.is_file() else {}

    def record(result: dict) -> None:
        done[result["name"]] = result
        with done_file.open("a") as f:
            f.write(json.dumps(result) + "\n")

    kw = opd_addition.run_options(args)
    assets = opd_addition.build_assets(out / "assets", args.teacher_sft_steps, args.student_sft_steps,
                                       args.workers, args.seed)
    if "teacher" not in done:
        acc = model_accuracy(assets["teacher"], assets, out / "teacher_val", args.workers)
        record({"name": "teacher", "accuracy": acc})
    for variant in args.variants.split(","):
        if variant not in done:
            record({"name": variant, **opd_addition.run(variant, assets, out / variant, **kw)})
    names = args.variants.split(",")
    if args.self_distill:
        sd_assets = self_distill_addition.build_assets(out / "assets_self_distill", args.self_distill_sft_steps,
                                                       args.workers, args.seed)
        for variant in ("opsd", "grpo"):
            name = f"self-distill: {variant}"
            if name not in done:
                run_out = out / f"self_distill_{variant}"
                args_list = self_distill_addition.run_args(variant, sd_assets, run_out, **kw)
                record({"name": name, **opd_addition.run_main_ppo(args_list, run_out)})
            names.append(name)
    text = (f"teacher (tiny s, {args.teacher_sft_steps} SFT steps) held-out exact match: "
            f"{100 * done['teacher']['accuracy']:.1f}%; student: the demo model's size, {args.student_sft_steps} SFT steps; "
            f"{args.prompts} prompts x {args.n} samples per step, lr {args.lr}, seed {args.seed}\n\n"
            + table([{"name": n, **{k: v for k, v in done[n].items() if k != "name"}} for n in names]))
    (out / "opd_vs_grpo.md").write_text(text)
    print(text, flush=True)
    return text


if __name__ == "__main__":
    main()
