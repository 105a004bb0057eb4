"""On-policy distillation on CPU: a larger tiny model teaches a smaller one the built-in addition task.

    uv run python examples/distillation/opd_addition.py --out DIR [--variant forward_kl_topk] [--steps 40]

Assets (built once under ``DIR/assets`` and reused): the demo's task (``a+b=``, held-out problems disjoint
from training), a teacher of the tiny ``s`` size (hidden 256, 4 layers, 3.2M parameters) warm-started with
``--teacher-sft-steps`` SFT steps, and a student of the demo model's size (hidden 128, 3 layers, 457k
parameters) warm-started with ``--student-sft-steps``. Then one run through ``main_ppo`` from the
student's warm start:

    grpo              the baseline: GRPO on the exact-match reward, no teacher
    k3                reverse KL (k3 estimator on the sampled token), back-propagated; no task reward
    k1_pg             reverse KL (k1) as a dense per-token reward through the PPO loss; no task reward
    forward_kl_topk   forward KL over the teacher's top-k log-probs; no task reward
    jsd_topk          GKD's generalised JSD (jsd_beta 0.5) over the teacher's top-k; no task reward
    k3_task           k3 added to GRPO's policy loss (upstream's default mix, use_task_rewards=true)
    k2, abs           reverse KL's other estimators on the sampled token, back-propagated; no task reward
    forward_kl_topk_lmbda0.5   forward_kl_topk with GKD's lmbda=0.5: half of the rows train on the answer

Every variant samples the same number of trajectories per step (``--prompts`` x ``--n``) from the same
start and validates greedily on the held-out problems every ``--test-freq`` steps. The comparison of all
of them is ``benchmarks/opd_vs_grpo.py``; the self-distillation example is ``self_distill_addition.py``.
"""

from __future__ import annotations

import os

os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")  # Ray workers reuse this environment

import argparse  # noqa: E402
import json  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

TEACHER_MODEL = dict(size="s")  # hidden 256, 4 layers
STUDENT_MODEL = dict(hidden_size=128, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                     intermediate_size=256)  # the demo model's size

VARIANTS: dict[str, list[str]] = {
    "grpo": [],
    "k3": ["distillation.distillation_loss.loss_mode=k3", "distillation.distillation_loss.use_task_rewards=false"],
    "k1_pg": ["distillation.distillation_loss.loss_mode=k1", "distillation.distillation_loss.use_policy_gradient=true",
              "distillation.distillation_loss.use_task_rewards=false"],
    "forward_kl_topk": ["distillation.distillation_loss.loss_mode=forward_kl_topk",
                        "distillation.distillation_loss.use_task_rewards=false"],
    "jsd_topk": ["distillation.distillation_loss.loss_mode=jsd_topk", "distillation.distillation_loss.jsd_beta=0.5",
                 "distillation.distillation_loss.use_task_rewards=false"],
    "k3_task": ["distillation.distillation_loss.loss_mode=k3", "distillation.distillation_loss.use_task_rewards=true"],
    "k2": ["distillation.distillation_loss.loss_mode=k2", "distillation.distillation_loss.use_task_rewards=false"],
    "abs": ["distillation.distillation_loss.loss_mode=abs", "distillation.distillation_loss.use_task_rewards=false"],
    # GKD: half of the rows train on the ground truth's tokens instead of the student's sample
    "forward_kl_topk_lmbda0.5": ["distillation.distillation_loss.loss_mode=forward_kl_topk",
                                 "distillation.distillation_loss.use_task_rewards=false",
                                 "distillation.distillation_loss.lmbda=0.5",
                                 # the rows replaced by answers were not sampled: the actor recomputes
                                 "actor_rollout_ref.rollout.calculate_log_probs=false",
                                 "actor_rollout_ref.actor.use_rollout_log_probs=false"],
}


def _sft(model: str, data: dict, out: Path, steps: int, workers: int, seed: int, files: str = "sft") -> str:
    from verl.trainer.demo import sft_args
    from verl.trainer.sft import load_sft_config, validate_sft_config
    from verl.trainer.sft_trainer import run_sft

    args = sft_args(model, data, out, steps, workers) + [f"data.train_files={data[files]}", f"data.seed={seed}",
                                                         f"trainer.seed={seed}"]
    cfg = load_sft_config(args)
    validate_sft_config(cfg)
    return str(run_sft(cfg)["hf_model"])


def build_assets(root: str | os.PathLike, teacher_sft_steps: int, student_sft_steps: int, workers: int = 2,
                 seed: int = 1) -> dict[str, Any]:
    """The task, the teacher and the student warm starts under ``root`` (reused when the record matches)."""
    from verl.trainer.demo import write_data
    from verl.trainer.model_builders import MODEL_BUILDERS

    root = Path(root).absolute()
    want = {"teacher_sft_steps": teacher_sft_steps, "student_sft_steps": student_sft_steps, "seed": seed}
    record = root / "assets.json"
    if record.is_file():
        done = json.loads(record.read_text())
        if {k: done.get(k) for k in want} == want and Path(done["teacher"]).exists():
            return done
    data = write_data(root / "data")
    build = MODEL_BUILDERS.get("tiny_qwen2")
    teacher_base = build(root / "teacher_base", **TEACHER_MODEL)
    student_base = build(root / "student_base", **STUDENT_MODEL)
    print(f"[opd] teacher: {teacher_sft_steps} SFT steps; student: {student_sft_steps} SFT steps", flush=True)
    out = {**want, "train": data["train"], "test": data["test"],
           "teacher": _sft(teacher_base, data, root / "teacher_sft", teacher_sft_steps, workers, seed),
           "student": _sft(student_base, data, root / "student_sft", student_sft_steps, workers, seed)}
    record.write_text(json.dumps(out, indent=2))
    return out


def run_args(variant: str, assets: dict, out: Path, steps: int, workers: int, prompts: int, n: int,
             test_freq: int, lr: float, seed: int) -> list[str]:
    """``main_ppo``'s key=value arguments of one variant (the demo's GRPO settings + distillation)."""
    from verl.trainer.demo import rl_args

    args = rl_args(assets["student"], assets, out, steps, workers, lr=lr) + [
        f"data.train_batch_size={prompts}", f"actor_rollout_ref.rollout.n={n}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={prompts}",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={prompts * n // workers}",
        f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={prompts * n // workers}",
        f"trainer.test_freq={test_freq}", f"trainer.experiment_name=opd_{variant}", "trainer.progress_bar=false",
        f"data.seed={seed}", f"trainer.seed={seed}",
    ]
    if variant == "grpo":
        return args
    return args + [
        "distillation.enabled=true", "distillation.nnodes=1", "distillation.n_gpus_per_node=1",
        f"distillation.teacher_models.teacher_model.model_path={assets['teacher']}",
        "distillation.teacher_models.teacher_model.inference.name=hf",
        "distillation.teacher_models.teacher_model.inference.dtype=float32",
        "distillation.teacher_models.teacher_model.inference.tensor_model_parallel_size=1",
        *VARIANTS[variant],
    ]


def val_curve(metrics_file: Path) -> list[tuple[int, float]]:
    """Held-out greedy exact match per validation step."""
    rows = [json.loads(line) for line in metrics_file.read_text().splitlines() if line.strip()]
    return [(int(r["step"]), float(r["val/arithmetic/reward"])) for r in rows if "val/arithmetic/reward" in r]


def step_seconds(metrics_file: Path) -> float:
    """Median ``timing_s/step`` of the training steps without a validation pass (``timing_s/testing``)."""
    import statistics

    rows = [json.loads(line) for line in metrics_file.read_text().splitlines() if line.strip()]
    times = [float(r["timing_s/step"]) for r in rows if "timing_s/step" in r and "timing_s/testing" not in r]
    return round(statistics.median(times), 2) if times else float("nan")


def run_main_ppo(args: list[str], out: Path) -> dict[str, Any]:
    """``main_ppo``'s ``run_ppo`` on ``args``; the validation curve, wall time (start-up and validation
    included) and median seconds per training step of the run written to ``out``."""
    import time

    from verl.trainer.config import load_config, validate_config
    from verl.trainer.main_ppo import run_ppo

    cfg = load_config(args)
    validate_config(cfg)
    start = time.time()
    run_ppo(cfg)
    return {"val_curve": val_curve(out / "metrics.jsonl"), "seconds": round(time.time() - start, 1),
            "step_seconds": step_seconds(out / "metrics.jsonl")}


def run(variant: str, assets: dict, out: Path, **kw: Any) -> dict[str, Any]:
    """One variant (``run_args``'s keywords) through ``main_ppo``."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; known: {', '.join(VARIANTS)}")
    return {"variant": variant, **run_main_ppo(run_args(variant, assets, out, **kw), out)}


def add_run_options(p: argparse.ArgumentParser) -> None:
    """The RL run's options, shared by the examples and benchmarks/opd_vs_grpo.py."""
    p.add_argument("--steps", type=int, default=40, help="RL steps")
    p.add_argument("--prompts", type=int, default=16, help="prompts per step")
    p.add_argument("--n", type=int, default=8, help="samples per prompt")
    p.add_argument("--test-freq", type=int, default=10)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--workers", type=int, default=2, help="student workers (a teacher has one more)")
    p.add_argument("--seed", type=int, default=1)


def run_options(args: argparse.Namespace) -> dict[str, Any]:
    """``run_args``'s keywords from `add_run_options`' options."""
    return dict(steps=args.steps, workers=args.workers, prompts=args.prompts, n=args.n, test_freq=args.test_freq,
                lr=args.lr, seed=args.seed)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="output folder (assets/ is reused across runs)")
    p.add_argument("--variant", default="forward_kl_topk", choices=list(VARIANTS))
    p.add_argument("--teacher-sft-steps", type=int, default=400)
    p.add_argument("--student-sft-steps", type=int, default=150)
    add_run_options(p)
    args = p.parse_args(argv)
    out = Path(args.out).absolute()
    assets = build_assets(out / "assets", args.teacher_sft_steps, args.student_sft_steps, args.workers, args.seed)
    result = run(args.variant, assets, out / args.variant, **run_options(args))
    print(json.dumps(result), flush=True)
    return result


if __name__ == "__main__":
    main()
