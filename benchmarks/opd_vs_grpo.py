"""On-policy distillation (each loss variant) against GRPO from the same student start, equal samples.

    uv run python benchmarks/opd_vs_grpo.py --out DIR [--steps 40] [--variants grpo,k3,...] [--self-distill]

The task, models and variants are ``examples/distillation/opd_addition.py``'s: a teacher of the demo
model's size warm-started longer, an ``xs`` student warm-started briefly, then every variant from that
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
from typing import Any  # noqa: E402

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


def _run_self_distill(variant: str, assets: dict, out: Path, kw: dict) -> dict[str, Any]:
    import time

    from verl.trainer.config import load_config, validate_config
    from verl.trainer.main_ppo import run_ppo

    cfg = load_config(self_distill_addition.run_args(variant, assets, out, **kw))
    validate_config(cfg)
    start = time.time()
    run_ppo(cfg)
    return {"val_curve": opd_addition.val_curve(out / "metrics.jsonl"), "seconds": round(time.time() - start, 1)}


def table(results: list[dict], steps: int) -> str:
    checkpoints = sorted({s for r in results for s, _ in r["val_curve"]})
    cols = ["run", *[f"step {s}" for s in checkpoints], "best", f"wall time ({steps} steps)", "s / step"]
    rows = []
    for r in results:
        curve = dict(r["val_curve"])
        rows.append([r["name"], *[f"{100 * curve[s]:.1f}%" if s in curve else "" for s in checkpoints],
                     f"{100 * max(curve.values()):.1f}%" if curve else "", f"{r['seconds']:.0f} s",
                     f"{r['seconds'] / steps:.1f}"])
    return markdown_table(cols, rows)


def main(argv: list[str] | None = None) -> str:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--variants", default=",".join(opd_addition.VARIANTS))
    p.add_argument("--self-distill", action="store_true")
    p.add_argument("--teacher-sft-steps", type=int, default=600)
    p.add_argument("--student-sft-steps", type=int, default=120)
    p.add_argument("--self-distill-sft-steps", type=int, default=200)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--prompts", type=int, default=16)
    p.add_argument("--n", type=int, default=8)
    p.add_argument("--test-freq", type=int, default=10)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args(argv)
    out = Path(args.out).absolute()
    out.mkdir(parents=True, exist_ok=True)
    done_file = out / "results.jsonl"
    done = {r["name"]: r for r in map(json.loads, done_file.read_text().splitlines())} if done_file.is_file() else {}

    def record(result: dict) -> None:
        done[result["name"]] = result
        with done_file.open("a") as f:
            f.write(json.dumps(result) + "\n")

    kw = dict(steps=args.steps, workers=args.workers, prompts=args.prompts, n=args.n, test_freq=args.test_freq,
              lr=args.lr, seed=args.seed)
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
                record({"name": name, **_run_self_distill(variant, sd_assets, out / f"self_distill_{variant}", kw)})
            names.append(name)
    text = (f"teacher (demo size, {args.teacher_sft_steps} SFT steps) held-out exact match: "
            f"{100 * done['teacher']['accuracy']:.1f}%; student: xs, {args.student_sft_steps} SFT steps; "
            f"{args.prompts} prompts x {args.n} samples per step, lr {args.lr}, seed {args.seed}\n\n"
            + table([{"name": n, **{k: v for k, v in done[n].items() if k != "name"}} for n in names], args.steps))
    (out / "opd_vs_grpo.md").write_text(text)
    print(text, flush=True)
    return text


if __name__ == "__main__":
    main()
