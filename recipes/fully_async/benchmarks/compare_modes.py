"""Synchronous vs one-step-off vs fully asynchronous GRPO on CPU: same task, model, seed and sample budget.

    uv run --package verl-recipe-fully-async python recipes/fully_async/benchmarks/compare_modes.py \\
        --out outputs/fully_async_compare [--steps 60] [--modes sync,sync_2pools,one_step_off,fully_async]

The task and model are core's embedded default (addition, the tiny Qwen2 after its SFT warm start, made once
under ``--out/assets``); every run trains 60 steps x 16 prompts x 8 samples (960 prompts) from the same
warm-started weights with the same GRPO settings, and validates greedily on the held-out problems before
training (once, core's validation of the warm-started model), every 10 steps and at the end. Modes:

- ``sync``: core's ``RayPPOTrainer``, actor and rollout colocated on 2 workers (the hybrid engine);
- ``sync_2pools``: this recipe on 1 rollout + 1 trainer worker with staleness_threshold=0,
  trigger_parameter_sync_step=1, no partial rollout, whole-batch waves: on-policy, no overlap;
- ``one_step_off``: configs/one_step_off_cpu.yaml (1 + 1 workers);
- ``fully_async``: configs/fully_async_cpu.yaml (1 + 1 workers, s=0.5, sync every 2 steps, partial rollout).

Wall time is ``fit()`` without the validation before training (worker start-up excluded; the validations
at steps 10, 20, ... included, on the trainer pool); a pool's idle time is its wall time minus the time
its workers spent in calls (core's stage timings for ``sync``; the recipe's accounting for the others).
Prints a markdown table and writes ``results.json``.
"""

from __future__ import annotations

import os

os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")

import argparse  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

MODES = ("sync", "sync_2pools", "one_step_off", "fully_async")
VAL_KEY = "val-core/arithmetic/reward/mean@1"


def assets(out: Path) -> dict[str, str]:
    from verl.trainer.demo import warm_started_assets
    from verl_recipe_fully_async.main import SFT_STEPS, SFT_WORKERS

    return warm_started_assets(out / "assets", SFT_STEPS, SFT_WORKERS)


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def run_sync(a: dict, out: Path, steps: int, *extra: str) -> dict:
    """Core's synchronous loop on 2 colocated workers, the demo's GRPO settings."""
    from verl.trainer.config import load_config, validate_config
    from verl.trainer.demo import rl_args
    from verl.trainer.main_ppo import build_trainer

    data = {"train": a["train"], "test": a["test"]}
    cfg = load_config(
        [
            *rl_args(a["model"], data, out, steps, 2),
            "trainer.logger=[jsonl]",
            "trainer.progress_bar=false",
            "trainer.val_before_train=false",
            *extra,
        ]
    )
    validate_config(cfg)
    trainer = build_trainer(cfg)
    trainer.init_workers()
    try:
        t0 = time.perf_counter()
        last = trainer.fit()
        wall = time.perf_counter() - t0
    finally:
        trainer.shutdown()
    if "trainer.val_only=true" in extra:
        return last
    log = rows(out / "metrics.jsonl")
    busy = sum(
        r.get(f"timing_s/{k}", 0.0)
        for r in log
        for k in ("gen", "old_log_prob", "ref", "update_actor", "testing")
    )
    val = [r for r in log if VAL_KEY in r]
    return {
        "wall_s": wall,
        "pools": {"colocated (2 workers)": wall - busy},
        "val_end": val[-1][VAL_KEY],
        "stale_samples": 0.0,
        "steps": steps,
    }


def run_recipe(a: dict, out: Path, steps: int, mode: str) -> dict:
    from verl.trainer.main_ppo import build_trainer
    from verl_recipe_fully_async.main import ONE_STEP_OFF, RECIPE
    from verl_recipe_fully_async.trainer import SUMMARY_FILE

    recipe = ONE_STEP_OFF if mode == "one_step_off" else RECIPE
    extra = []
    if mode == "sync_2pools":
        extra = [
            "async_training.staleness_threshold=0",
            "async_training.trigger_parameter_sync_step=1",
            "async_training.partial_rollout=false",
            "data.gen_batch_size=16",
        ]
    cfg = recipe.load_config(
        [
            f"data.train_files={a['train']}",
            f"data.val_files={a['test']}",
            f"actor_rollout_ref.model.path={a['model']}",
            f"trainer.total_training_steps={steps}",
            f"trainer.default_local_dir={out}",
            "trainer.logger=[jsonl]",
            "trainer.val_before_train=false",
            *extra,
        ]
    )
    trainer = build_trainer(cfg, **recipe.trainer_kwargs(cfg))
    trainer.init_workers()
    try:
        t0 = time.perf_counter()
        trainer.fit()
        wall = time.perf_counter() - t0
    finally:
        trainer.shutdown()
    summary = json.loads((out / SUMMARY_FILE).read_text())
    log = rows(out / "metrics.jsonl")
    val = [r for r in log if VAL_KEY in r]
    # the loops' clock starts after the first weight transfer: the rollout pool is idle before that
    before = wall - summary["wall_s"]
    return {
        "wall_s": wall,
        "pools": {
            "rollout (1 worker)": summary["rollout_idle_s"] + before,
            "trainer (1 worker)": summary["trainer_idle_s"],
        },
        "val_end": val[-1][VAL_KEY],
        "stale_samples": summary["stale_samples"],
        "steps": steps,
    }


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="outputs/fully_async_compare")
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--modes", default=",".join(MODES))
    args = p.parse_args(argv)
    import ray

    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    if not ray.is_initialized():
        ray.init(
            num_cpus=2,
            include_dashboard=False,
            runtime_env={"env_vars": {"OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}},
        )
    a = assets(out)
    start = run_sync(a, out / "val_start", 1, "trainer.val_only=true", "trainer.val_before_train=true")[
        VAL_KEY
    ]
    results = {}
    for mode in args.modes.split(","):
        if mode not in MODES:
            raise SystemExit(f"--modes: {mode!r} is not one of {', '.join(MODES)}")
        print(f"[compare] {mode}: {args.steps} steps", flush=True)
        run = run_sync if mode == "sync" else (lambda a_, o_, s_, m=mode: run_recipe(a_, o_, s_, m))
        results[mode] = {**run(a, out / mode, args.steps), "val_start": start}
        (out / "results.json").write_text(json.dumps(results, indent=2))
    samples = args.steps * 16
    print(
        "| mode | workers | wall s | samples/s | idle s per pool | stale samples | held-out exact match start -> end |"
    )
    print("|---|---|---|---|---|---|---|")
    for mode, r in results.items():
        idle = ", ".join(f"{k}: {v:.0f}" for k, v in r["pools"].items())
        workers = "2 colocated" if mode == "sync" else "1 rollout + 1 trainer"
        print(
            f"| {mode} | {workers} | {r['wall_s']:.0f} | {samples / r['wall_s']:.2f} | {idle} | "
            f"{r['stale_samples']:.0f} | {r['val_start']:.1%} -> {r['val_end']:.1%} |"
        )
    return results


if __name__ == "__main__":
    main()
