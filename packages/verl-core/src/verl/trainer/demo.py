"""The embedded default: ``python -m verl.trainer.main_ppo`` with no arguments (or ``verl-demo``).

On a CPU machine, in minutes, a tiny language model learns two-digit addition through the real stack:

1. the built-in task (``a+b=`` with a in 0..99, b in 0..9; exact-match reward) is written to parquet,
   split into train and held-out test problems by a fixed hash;
2. a random-init Qwen2 (about 450k parameters) and a character tokenizer are created locally;
3. a short SFT warm start (FSDP2 workers through the Ray single controller) teaches the answer format
   and part of the task: RL from a random model cannot find exact answers in minutes;
4. GRPO (same workers, the native rollout, whose log-probs serve as the old log-probs; verl-rewards' exact-match ``arithmetic`` scorer) then raises the
   held-out greedy exact-match accuracy, validated before RL and every few steps.

Outputs (printed at the end): ``sft/`` and ``rl/`` with ``config.yaml``, ``metrics.jsonl``, TensorBoard
events, checkpoints, and ``rl/reward_curve.png``; ``summary.json`` holds the before/after accuracy.
Options: ``--out DIR``, ``--sft-steps N``, ``--rl-steps N``, ``--workers N`` (quick runs for tests),
``--model-dtype bfloat16`` (bf16 compute on fp32 master weights in SFT and RL, as a GPU run does),
``--sft-model DIR`` (skip the warm start, start GRPO from DIR), ``--worker-backend local`` (both stages in this
process, without Ray; with ``--workers 1``), ``--device cuda`` (both stages on the GPU), ``--lora-rank R --lora-alpha A --lr LR``
(GRPO trains LoRA adapters instead of every weight; needs verl-workers[lora]; see docs/lora.md).
What it reaches, with the commands: docs/measurements.md.
"""

from __future__ import annotations

import os

# Under `uv run`, Ray would rebuild the project environment for its workers (minutes); they share ours.
# Ray reads this when it is imported, so it is set before anything imports Ray.
os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")

import argparse  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

DATA_SOURCE = "arithmetic"
# The demo model: 457k parameters with the demo tokenizer (counted in docs/lora.md), learns the task with SFT in a few hundred steps.
MODEL_SIZES = dict(hidden_size=128, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                   intermediate_size=256)
DEFAULT_SFT_STEPS = 180
DEFAULT_RL_STEPS = 60
DEFAULT_RL_LR = 1e-4  # full fine-tuning's; LoRA runs usually want about 10x this


def addition_rows(split: str) -> list[dict]:
    """Every problem ``a+b=`` (a in 0..99, b in 0..9) of ``split`` in the RL row contract."""
    from verl.utils.dataset.tasks import arithmetic_split

    rows = []
    for a in range(100):
        for b in range(10):
            if arithmetic_split(a, b, "+") != split:
                continue
            rows.append({
                "data_source": DATA_SOURCE,
                "prompt": [{"role": "user", "content": f"{a}+{b}="}],
                "ability": "math",
                "reward_model": {"style": "rule", "ground_truth": str(a + b)},
                "extra_info": {"split": split, "index": len(rows)},
            })
    return rows


def write_data(data_dir: Path) -> dict[str, str]:
    """RL train/test parquet files and the SFT conversations (prompt + the answer as the reply)."""
    from verl.utils.dataset.rows import write_parquet

    train, test = addition_rows("train"), addition_rows("test")
    sft = [{"messages": r["prompt"] + [{"role": "assistant", "content": r["reward_model"]["ground_truth"]}]}
           for r in train]
    return {
        "train": str(write_parquet(train, data_dir / "train.parquet")),
        "test": str(write_parquet(test, data_dir / "test.parquet")),
        "sft": str(write_parquet(sft, data_dir / "sft_train.parquet")),
        "n_train": len(train),
        "n_test": len(test),
    }


def build_model(model_dir: Path) -> str:
    """The tiny Qwen2 + char tokenizer through verl-workers' registered builder."""
    from verl.trainer.model_builders import MODEL_BUILDERS

    return MODEL_BUILDERS.get("tiny_qwen2")(model_dir, **MODEL_SIZES)


def sft_args(model: str, data: dict, out: Path, steps: int, workers: int, model_dtype: str = "float32",
             device: str = "cpu") -> list[str]:
    return [f"model.model_dtype={model_dtype}",
        f"data.train_files={data['sft']}", f"model.path={model}", "data.max_length=64",
        "data.train_batch_size=64", f"data.micro_batch_size_per_gpu={64 // workers}",
        "model.enable_gradient_checkpointing=false", "optim.lr=1e-3", "optim.lr_warmup_steps=10",
        "optim.lr_scheduler_type=constant", "optim.weight_decay=0.0",
        f"trainer.device={device}", "trainer.nnodes=1", f"trainer.n_gpus_per_node={workers}",
        f"trainer.total_training_steps={steps}", "trainer.logger=[jsonl,tensorboard]",
        "trainer.project_name=verl_demo", "trainer.experiment_name=sft_warm_start",
        f"trainer.default_local_dir={out}", "trainer.resume_mode=disable",
    ]


def rl_args(model: str, data: dict, out: Path, steps: int, workers: int, model_dtype: str = "float32",
            lr: float = DEFAULT_RL_LR, device: str = "cpu") -> list[str]:
    prompts, n = 16, 8
    return [f"actor_rollout_ref.model.model_dtype={model_dtype}",
        f"data.train_files={data['train']}", f"data.val_files={data['test']}",
        f"actor_rollout_ref.model.path={model}", "actor_rollout_ref.model.enable_gradient_checkpointing=false",
        "data.max_prompt_length=32", "data.max_response_length=6", f"data.train_batch_size={prompts}",
        "algorithm.adv_estimator=grpo",
        f"actor_rollout_ref.rollout.n={n}", "actor_rollout_ref.rollout.temperature=1.0",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={prompts}",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={prompts * n // workers}",
        f"actor_rollout_ref.actor.optim.lr={lr}", "actor_rollout_ref.actor.optim.weight_decay=0.0",
        "actor_rollout_ref.actor.use_kl_loss=false", "actor_rollout_ref.actor.entropy_coeff=0.0",
        # one PPO epoch over one mini-batch from the weights that sampled: the rollout's log-probs are
        # the old log-probs, so the extra forward pass is skipped
        "actor_rollout_ref.rollout.calculate_log_probs=true", "actor_rollout_ref.actor.use_rollout_log_probs=true",
        f"trainer.device={device}", "trainer.nnodes=1", f"trainer.n_gpus_per_node={workers}",
        f"trainer.total_training_steps={steps}", "trainer.test_freq=10", "trainer.save_freq=-1",
        "trainer.val_before_train=true", "trainer.logger=[jsonl,tensorboard]",
        "trainer.project_name=verl_demo", "trainer.experiment_name=grpo_arithmetic",
        f"trainer.default_local_dir={out}", "trainer.resume_mode=disable", "trainer.progress_bar=true",
    ]


def warm_started_assets(root: str | os.PathLike, sft_steps: int = DEFAULT_SFT_STEPS, workers: int = 2) -> dict[str, str]:
    """The task files and the warm-started model under ``root``, built on first use and reused after.

    For recipes' CPU defaults: ``data/`` (``write_data``), ``base_model/`` (``build_model``), ``sft/``
    (``sft_steps`` steps of core's SFT trainer, ``workers`` FSDP2 workers) and ``warm_start.json``
    recording the result. Returns ``{"train", "test", "sft", "model"}`` paths; a record made with
    another step count is rebuilt.
    """
    from verl.trainer.sft import load_sft_config, validate_sft_config
    from verl.trainer.sft_trainer import run_sft

    root = Path(root).absolute()
    record = root / "warm_start.json"
    if record.is_file():
        done = json.loads(record.read_text())
        if done.get("sft_steps") == sft_steps and all(Path(done[k]).exists() for k in ("train", "test", "sft", "model")):
            return {k: done[k] for k in ("train", "test", "sft", "model")}
    data = write_data(root / "data")
    model = build_model(root / "base_model")
    cfg = load_sft_config(sft_args(model, data, root / "sft", sft_steps, workers))
    validate_sft_config(cfg)
    print(f"[warm start] {sft_steps} SFT steps of the tiny model on {data['n_train']} addition problems", flush=True)
    out = {"train": data["train"], "test": data["test"], "sft": data["sft"], "model": str(run_sft(cfg)["hf_model"])}
    record.write_text(json.dumps({**out, "sft_steps": sft_steps}, indent=2))
    return out


def asset_overrides(config: Any, sft_steps: int = DEFAULT_SFT_STEPS, workers: int | None = None) -> list[str]:
    """``key=value`` overrides for a trainer config that leaves ``data.train_files`` or
    ``actor_rollout_ref.model.path`` unset: the task and the warm-started model of `warm_started_assets`
    under ``{trainer.default_local_dir}/assets`` (built on first use, on ``workers`` SFT workers, by
    default the config's worker count). Recipes' CPU defaults load their config, add these and load again."""
    need_data = not config.data.train_files
    need_model = not config.actor_rollout_ref.model.path
    if not (need_data or need_model):
        return []
    if workers is None:
        workers = int(config.trainer.nnodes) * int(config.trainer.n_gpus_per_node)
    assets = warm_started_assets(Path(config.trainer.default_local_dir) / "assets", sft_steps, workers)
    out = [f"data.train_files={assets['train']}", f"data.val_files={assets['test']}"] if need_data else []
    return out + ([f"actor_rollout_ref.model.path={assets['model']}"] if need_model else [])


def _val_curve(metrics_file: Path) -> list[tuple[int, float]]:
    key = f"val/{DATA_SOURCE}/reward"
    rows = [json.loads(line) for line in metrics_file.read_text().splitlines() if line.strip()]
    return [(int(r["step"]), float(r[key])) for r in rows if key in r]


def _seconds_per_step(metrics_file: Path) -> float:
    """Median wall time of a GRPO step (``timing_s/step``), validation steps included as the trainer
    logs them; the median keeps a slow first step (start-up) out."""
    import statistics

    rows = [json.loads(line) for line in metrics_file.read_text().splitlines() if line.strip()]
    times = [float(r["timing_s/step"]) for r in rows if "timing_s/step" in r]
    return round(statistics.median(times), 3) if times else float("nan")


def run(out_dir: str | os.PathLike | None = None, sft_steps: int = DEFAULT_SFT_STEPS,
        rl_steps: int = DEFAULT_RL_STEPS, workers: int = 2, extra_rl_args: list[str] | None = None,
        model_dtype: str = "float32", sft_model: str | None = None, lr: float = DEFAULT_RL_LR,
        extra_sft_args: list[str] | None = None, device: str = "cpu") -> dict[str, Any]:
    """Run the whole pipeline; returns the summary (also written to ``<out>/summary.json``).
    ``sft_model``: a Hugging Face folder to start GRPO from instead of running the SFT warm start.
    ``device``: ``trainer.device`` of both stages (``cpu`` or ``cuda``)."""
    from verl.trainer.config import load_config, validate_config
    from verl.trainer.ppo.run import run_ppo
    from verl.trainer.sft import load_sft_config, validate_sft_config
    from verl.trainer.sft_trainer import run_sft

    start = time.time()
    out = Path(out_dir or f"outputs/demo-{time.strftime('%Y%m%d-%H%M%S')}").absolute()
    out.mkdir(parents=True, exist_ok=True)
    data = write_data(out / "data")
    model = build_model(out / "base_model")
    print(f"[demo] task: {data['n_train']} train / {data['n_test']} held-out addition problems; "
          f"model: tiny Qwen2 in {model}", flush=True)

    if sft_model is None:
        sft_cfg = load_sft_config(sft_args(model, data, out / "sft", sft_steps, workers, model_dtype, device)
                                  + list(extra_sft_args or []))
        validate_sft_config(sft_cfg)
        print(f"[demo] SFT warm start: {sft_steps} steps", flush=True)
        sft = run_sft(sft_cfg)
    else:
        print(f"[demo] no SFT warm start: GRPO starts from {sft_model}", flush=True)
        sft, sft_steps = {"hf_model": str(sft_model)}, 0
    sft_time = time.time() - start

    rl_args_ = rl_args(sft["hf_model"], data, out / "rl", rl_steps, workers, model_dtype, lr, device)
    rl_cfg = load_config(rl_args_ + list(extra_rl_args or []))
    validate_config(rl_cfg)
    print(f"[demo] GRPO from the SFT model: {rl_steps} steps, greedy validation on held-out problems", flush=True)
    run_ppo(rl_cfg)

    curve = _val_curve(out / "rl" / "metrics.jsonl")
    summary = {
        "val_exact_match_start_of_rl": curve[0][1],
        "val_exact_match_end_of_rl": curve[-1][1],
        "val_curve": curve,
        "sft_steps": sft_steps,
        "rl_steps": rl_steps,
        "model_dtype": model_dtype,
        "device": device,
        "rl_lr": lr,
        "lora_rank": int(rl_cfg.actor_rollout_ref.model.lora_rank),
        "lora_alpha": rl_cfg.actor_rollout_ref.model.lora_alpha,
        "rl_seconds_per_step": _seconds_per_step(out / "rl" / "metrics.jsonl"),
        "sft_seconds": round(sft_time, 1),
        "total_seconds": round(time.time() - start, 1),
        "outputs": {
            "rl_metrics": str(out / "rl" / "metrics.jsonl"),
            "rl_tensorboard": str(out / "rl" / "tensorboard"),
            "reward_plot": str(out / "rl" / "reward_curve.png"),
            "rl_config": str(out / "rl" / "config.yaml"),
            "sft_metrics": str(out / "sft" / "metrics.jsonl"),
            "sft_config": str(out / "sft" / "config.yaml"),
            "sft_model": sft["hf_model"],
        },
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    print(
        f"[demo] held-out exact match: {summary['val_exact_match_start_of_rl']:.1%} after SFT -> "
        f"{summary['val_exact_match_end_of_rl']:.1%} after GRPO ({summary['total_seconds']:.0f} s)\n"
        f"[demo] outputs in {out}: summary.json, rl/metrics.jsonl, rl/tensorboard, rl/reward_curve.png, "
        f"rl/config.yaml, sft/",
        flush=True,
    )
    return summary


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(prog="verl-demo", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=None, help="output directory (default: outputs/demo-<time>)")
    p.add_argument("--sft-steps", type=int, default=DEFAULT_SFT_STEPS)
    p.add_argument("--rl-steps", type=int, default=DEFAULT_RL_STEPS)
    p.add_argument("--workers", type=int, default=2, help="FSDP2 workers (CPU processes)")
    p.add_argument("--model-dtype", default="float32", choices=["float32", "bfloat16"],
                   help="compute dtype (model_dtype); master weights stay fp32 either way")
    p.add_argument("--sft-model", default=None,
                   help="start GRPO from this Hugging Face folder (e.g. another run's sft/global_step_N/huggingface)")
    p.add_argument("--lr", type=float, default=DEFAULT_RL_LR, help="GRPO learning rate (actor.optim.lr)")
    p.add_argument("--lora-rank", type=int, default=0,
                   help="> 0: GRPO trains LoRA adapters of this rank (actor_rollout_ref.model.lora_rank)")
    p.add_argument("--lora-alpha", type=int, default=None, help="LoRA scale numerator (default: 2 x rank)")
    p.add_argument("--seed", type=int, default=None,
                   help="data order and sampling seed of both stages (SFT and RL data.seed, trainer.seed); "
                        "default: the configs' own")
    p.add_argument("--worker-backend", default=None, choices=["ray", "local"],
                   help="trainer.worker_backend of SFT and GRPO (local: in the driver process, one worker, "
                        "no Ray; needs --workers 1)")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="trainer.device of SFT and GRPO")
    args = p.parse_args(argv)
    backend = [] if args.worker_backend is None else [f"trainer.worker_backend={args.worker_backend}"]
    seeded = [] if args.seed is None else [f"data.seed={args.seed}", f"trainer.seed={args.seed}"]
    extra = backend + seeded
    if args.lora_rank > 0:
        alpha = args.lora_alpha if args.lora_alpha is not None else 2 * args.lora_rank
        extra += [f"actor_rollout_ref.model.lora_rank={args.lora_rank}", f"actor_rollout_ref.model.lora_alpha={alpha}"]
    elif args.lora_alpha is not None:
        p.error(f"--lora-alpha={args.lora_alpha} needs --lora-rank > 0 (LoRA is off)")
    return run(args.out, args.sft_steps, args.rl_steps, args.workers, extra_rl_args=extra,
               model_dtype=args.model_dtype, sft_model=args.sft_model, lr=args.lr,
               extra_sft_args=backend + seeded, device=args.device)


if __name__ == "__main__":
    main()
