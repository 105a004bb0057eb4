"""Memory options of the actor update: gradient checkpointing and the FSDP offload flags, measured.

    uv run python benchmarks/memory_options.py [--sizes xs s] [--lengths 64 256] [--steps 4]

What is timed is the actor's training pass exactly as ``ActorRolloutRefWorker`` runs it: the config
comes from ``verl.trainer.config.load_config(overrides)`` (unknown keys are errors) and passes
``validate_config``; the engine is ``verl.workers.engine.build_engine(actor.strategy, ...)`` with the
arguments ``init_model`` gives it (FSDP2, world size 1 on gloo); ``DataParallelPPOActor.update_policy``
trains on a synthetic GRPO batch of 64 rows x (4 prompt + R response) tokens with random
per-sequence advantages (one mini-batch, one micro-batch, one AdamW step per update, as in
``benchmarks/grpo_step``). Models: ``benchmarks/grpo_step/assets.py`` (``xs``, ``s``) plus ``m``
(hidden 512, 8 layers, 33.6M parameters, built the same way; about a minute per option).

Every (size, R, option) runs in its own fresh process, so ``ru_maxrss`` (peak resident set) is that
option's alone. Reported per option: median seconds per ``update_policy`` after ``--warmup`` steps, as
process CPU time and as wall time (with one torch thread, ``--threads 1``, the two agree on an idle
machine; on a shared one CPU time leaves out the time spent waiting for a core, so its ratios are the
ones to read), peak RSS, and "train peak" = peak RSS minus the RSS just before the first update (what
the training pass adds on top of the loaded model: activations, gradients, optimizer state, allocator
slack). ``--rounds`` repeats every option in alternating order; ratios are medians of per-round ratios.

An option the config check and the engine refuse (the offload flags on a CPU-only machine, see the
README section) shows the error instead of numbers. ``--bypass-cpu-offload-guard`` is a diagnostic: it
disables both guards in the child process only, to show what the flags would do if they were not there.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "grpo_step"))

import assets  # noqa: E402

PROMPT_TOKENS = 4
ROWS = 64  # 8 prompts x rollout.n=8, the GRPO benchmark's batch

#: option name -> config overrides on top of the baseline (real schema keys, validated by load_config)
OPTIONS: dict[str, list[str]] = {
    "baseline": [],
    "grad_ckpt": ["actor_rollout_ref.model.enable_gradient_checkpointing=true"],
    "param_offload": ["actor_rollout_ref.actor.fsdp_config.param_offload=true"],
    "optimizer_offload": ["actor_rollout_ref.actor.fsdp_config.optimizer_offload=true"],
    "both_offload": [
        "actor_rollout_ref.actor.fsdp_config.param_offload=true",
        "actor_rollout_ref.actor.fsdp_config.optimizer_offload=true",
    ],
}

#: a size above the GRPO benchmark's: 33.6M parameters (8x ``s``)
EXTRA_SIZES: dict[str, dict[str, int]] = {
    "m": dict(
        hidden_size=512,
        num_hidden_layers=8,
        num_attention_heads=8,
        num_key_value_heads=8,
        intermediate_size=2048,
    ),
}


def ensure_model(size: str, root: Path) -> Path:
    """``assets.ensure_model`` for ``xs``/``s``; ``m`` is built by the same function with its sizes."""
    if size in EXTRA_SIZES and size not in assets.SIZES:
        assets.SIZES[size] = EXTRA_SIZES[size]
    return assets.ensure_model(size, root)


def overrides(model_dir: Path, resp_len: int, option: str) -> list[str]:
    """The GRPO benchmark's actor settings as ``key=value`` overrides, plus ``option``'s keys."""
    if option not in OPTIONS:
        raise ValueError(f"unknown option {option!r}; known: {', '.join(OPTIONS)}")
    base = [
        f"data.train_files={model_dir / 'train.parquet'}",
        "data.train_batch_size=8",
        f"data.max_prompt_length={PROMPT_TOKENS}",
        f"data.max_response_length={resp_len}",
        f"actor_rollout_ref.model.path={model_dir}",
        # the schema's default is true; the baseline is the GRPO benchmark's setting (off)
        "actor_rollout_ref.model.enable_gradient_checkpointing=false",
        "actor_rollout_ref.rollout.n=8",
        "actor_rollout_ref.actor.strategy=fsdp2",
        "actor_rollout_ref.actor.ppo_mini_batch_size=8",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=64",
        "actor_rollout_ref.actor.ppo_epochs=1",
        "actor_rollout_ref.actor.optim.lr=1e-3",
        "actor_rollout_ref.actor.grad_clip=1.0",
        "actor_rollout_ref.actor.use_kl_loss=false",
        "actor_rollout_ref.actor.entropy_coeff=0.0",
        "algorithm.adv_estimator=grpo",
        "trainer.device=cpu",
        "trainer.nnodes=1",
        "trainer.n_gpus_per_node=1",
        "trainer.total_training_steps=100",
    ]
    return base + OPTIONS[option]


def _rss_mib() -> float:
    """Current resident set size of this process (MiB)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def grpo_batch(rows: int, resp_len: int, vocab: int, seed: int = 0):
    """A synthetic GRPO batch: full-length rows (no padding, as with ``ignore_eos``), GRPO-style
    per-sequence advantages broadcast over the response tokens."""
    import torch
    from verl import DataProto

    g = torch.Generator().manual_seed(seed)
    width = PROMPT_TOKENS + resp_len
    ids = torch.randint(5, vocab, (rows, width), generator=g)
    adv = torch.randn(rows, 1, generator=g).expand(rows, resp_len).contiguous()
    batch = {
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        "position_ids": torch.arange(width).expand(rows, width).contiguous(),
        "responses": ids[:, PROMPT_TOKENS:].contiguous(),
        "response_mask": torch.ones(rows, resp_len, dtype=torch.long),
        "advantages": adv,
    }
    return DataProto.from_dict(tensors=batch, meta_info={"temperature": 1.0})


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_child(
    size: str, resp_len: int, option: str, steps: int, warmup: int, root: Path, bypass: bool, threads: int
) -> dict:
    """Build the engine and actor as the worker does and time ``update_policy`` (in this process)."""
    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()), RANK="0", WORLD_SIZE="1", LOCAL_RANK="0"
    )
    import torch

    if threads > 0:
        torch.set_num_threads(threads)
    from verl.trainer.config import load_config
    from verl.trainer.config.validation import validate_config
    from verl.workers.actor.dp_actor import DataParallelPPOActor
    from verl.workers.engine import build_engine
    from verl.workers.fsdp_workers import init_distributed, per_rank_size

    model_dir = ensure_model(size, root)
    if bypass:  # both guards: the config check (before Ray would start) and the engine's own
        import verl.trainer.config.validation as validation
        import verl.workers.engine.fsdp as fsdp_engine

        validation._check_offload_on_cpu = lambda cfg, problems: None
        fsdp_engine._check_offload_flags = lambda engine_config, device: None
    cfg = load_config(overrides(model_dir, resp_len, option))
    validate_config(cfg)
    init_distributed()
    arc = cfg.actor_rollout_ref
    rss_start = _rss_mib()
    result: dict = {
        "size": size,
        "resp_len": resp_len,
        "option": option,
        "bypass": bypass,
        "threads": torch.get_num_threads(),
    }
    try:
        engine = build_engine(
            arc.actor.strategy,
            model_config=arc.model,
            engine_config=arc.actor.fsdp_config,
            optim_config=arc.actor.optim,
            model_type="causal_lm",
            grad_clip=arc.actor.grad_clip,
            total_training_steps=int(cfg.trainer.total_training_steps),
            checkpoint_config=arc.actor.checkpoint,
        )
    except (ValueError, NotImplementedError, RuntimeError) as e:
        return {**result, "status": "build failed", "error": f"{type(e).__name__}: {e}"}
    actor = DataParallelPPOActor(
        arc.actor,
        engine,
        ppo_mini_batch_size_per_rank=per_rank_size(
            arc.actor.ppo_mini_batch_size, arc.rollout.n, 1, "ppo_mini_batch_size"
        ),
    )
    # What the flags turned into inside the module (read back, not assumed from the config).
    params = list(engine.module.parameters())
    result.update(
        n_params=sum(p.numel() for p in params),
        gradient_checkpointing=bool(engine.module.is_activation_checkpointing),
        param_devices=sorted({str(p.device) for p in params}),
    )
    data = grpo_batch(ROWS, resp_len, int(engine.hf_config.vocab_size))
    old, _ = actor.compute_log_prob(data)
    data.batch["old_log_probs"] = old
    rss_before = _rss_mib()
    times, cpu_times = [], []
    try:
        for i in range(warmup + steps):
            data.meta_info["global_steps"] = i
            t0, c0 = time.perf_counter(), time.process_time()
            metrics = actor.update_policy(data)
            times.append(time.perf_counter() - t0)
            cpu_times.append(time.process_time() - c0)
    except Exception as e:  # noqa: BLE001 - the benchmark reports what the engine did, whatever it was
        return {**result, "status": "update failed", "error": f"{type(e).__name__}: {str(e).splitlines()[0]}"}
    opt_devices = sorted(
        {
            str(v.device)
            for s in engine.optimizer.state.values()
            for v in s.values()
            if isinstance(v, torch.Tensor) and v.dim() > 0
        }
    )
    return {
        **result,
        "status": "ok",
        "step_s": statistics.median(times[warmup:]),
        "times": times,
        "cpu_step_s": statistics.median(cpu_times[warmup:]),
        "cpu_times": cpu_times,
        "peak_rss_mib": _peak_rss_mib(),
        "rss_start_mib": rss_start,
        "rss_before_steps_mib": rss_before,
        "train_peak_mib": _peak_rss_mib() - rss_before,
        "optimizer_state_devices": opt_devices,
        "grad_norm": metrics["actor/grad_norm"],
    }


def _spawn(args: argparse.Namespace, size: str, resp_len: int, option: str, bypass: bool) -> dict:
    cmd = [
        sys.executable,
        __file__,
        "--child",
        "--sizes",
        size,
        "--lengths",
        str(resp_len),
        "--options",
        option,
        "--steps",
        str(args.steps),
        "--warmup",
        str(args.warmup),
        "--assets",
        args.assets,
        "--threads",
        str(args.threads),
    ]
    if bypass:
        cmd.append("--bypass-cpu-offload-guard")
    proc = subprocess.run(cmd, capture_output=True, text=True)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        return {
            "size": size,
            "resp_len": resp_len,
            "option": option,
            "bypass": bypass,
            "status": "crashed",
            "error": f"exit {proc.returncode}: {tail}",
        }
    return json.loads(lines[-1])


def _key(r: dict) -> tuple:
    return (r["size"], r["resp_len"], r["option"], r["bypass"])


def summarise(results: list[dict]) -> list[dict]:
    """One row per (size, R, option, bypass): medians over rounds of the child's numbers and of the
    per-round ratios to that round's ``baseline`` (so load drift between rounds cancels)."""
    base = {
        (r["round"], r["size"], r["resp_len"]): r
        for r in results
        if r["option"] == "baseline" and r["status"] == "ok"
    }
    rows: dict[tuple, list[dict]] = {}
    for r in results:
        rows.setdefault(_key(r), []).append(r)
    out = []
    for key, runs in rows.items():
        ok = [r for r in runs if r["status"] == "ok"]
        if not ok:
            out.append({**runs[0], "rounds": len(runs)})
            continue
        row = {
            "size": key[0],
            "resp_len": key[1],
            "option": key[2],
            "bypass": key[3],
            "status": "ok",
            "rounds": len(ok),
        }
        for k in ("step_s", "cpu_step_s", "peak_rss_mib", "train_peak_mib"):
            row[k] = statistics.median(r[k] for r in ok)
            ratios = [
                r[k] / base[(r["round"], r["size"], r["resp_len"])][k]
                for r in ok
                if (r["round"], r["size"], r["resp_len"]) in base
            ]
            row[k + "_ratio"] = statistics.median(ratios) if ratios else None
        out.append(row)
    order = {name: i for i, name in enumerate([*assets.SIZES, *EXTRA_SIZES])}
    return sorted(
        out, key=lambda r: (order.get(r["size"], len(order)), r["resp_len"])
    )  # stable: options keep order


def table(rows: list[dict]) -> str:
    """Markdown table of :func:`summarise`'s rows; ratios are against ``baseline`` (same size and R)."""
    out = [
        "| size | R | option | s/step (CPU) | vs baseline | s/step (wall) | peak RSS MiB | vs baseline "
        "| train peak MiB | vs baseline |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        name = r["option"] + (" (guard bypassed)" if r["bypass"] else "")
        if r["status"] != "ok":
            out.append(
                f"| {r['size']} | {r['resp_len']} | {name} | {r['status']}: {r['error'][:72]}... | | | | | | |"
            )
            continue

        def ratio(key: str, row: dict = r) -> str:
            v = row[key + "_ratio"]
            return "-" if v is None else f"{v:.2f}"

        out.append(
            f"| {r['size']} | {r['resp_len']} | {name} | {r['cpu_step_s']:.3f} | {ratio('cpu_step_s')} | "
            f"{r['step_s']:.3f} | {r['peak_rss_mib']:.0f} | {ratio('peak_rss_mib')} | "
            f"{r['train_peak_mib']:.0f} | {ratio('train_peak_mib')} |"
        )
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", nargs="+", default=["xs", "s"], choices=sorted({*assets.SIZES, *EXTRA_SIZES}))
    ap.add_argument("--lengths", nargs="+", type=int, default=[64], help="response tokens R")
    ap.add_argument("--options", nargs="+", default=list(OPTIONS), choices=list(OPTIONS))
    ap.add_argument("--steps", type=int, default=4, help="timed update_policy calls per option")
    ap.add_argument("--warmup", type=int, default=1, help="untimed update_policy calls first")
    ap.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="repeat every option this often, order reversed every other round",
    )
    ap.add_argument("--threads", type=int, default=1, help="torch threads per child (0: torch's default)")
    ap.add_argument("--assets", default="/tmp/grpo_step_assets", help="where model folders are built")
    ap.add_argument(
        "--bypass-cpu-offload-guard",
        action="store_true",
        help="diagnostic: also run the offload options with the engine's CPU guard disabled",
    )
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--json", default=None, help="also write all results to this file")
    ap.add_argument(
        "--render",
        nargs="+",
        default=None,
        metavar="JSON",
        help="only print the table of earlier --json files (joined)",
    )
    args = ap.parse_args()

    if args.render:
        # rounds of different files are different rounds
        joined = [
            {**r, "round": f"{i}:{r['round']}"}
            for i, f in enumerate(args.render)
            for r in json.loads(Path(f).read_text())
        ]
        print(table(summarise(joined)))
        return

    if args.child:
        r = run_child(
            args.sizes[0],
            args.lengths[0],
            args.options[0],
            args.steps,
            args.warmup,
            Path(args.assets),
            args.bypass_cpu_offload_guard,
            args.threads,
        )
        print(json.dumps(r))
        return

    for size in args.sizes:  # build once, before any timed child
        ensure_model(size, Path(args.assets))
    print(
        f"# start {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average "
        f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}",
        flush=True,
    )
    results = []
    for size in args.sizes:
        for resp_len in args.lengths:
            runs = [(o, False) for o in args.options]
            if args.bypass_cpu_offload_guard:
                runs += [(o, True) for o in args.options if "offload" in o]
            for rnd in range(args.rounds):
                for option, bypass in runs if rnd % 2 == 0 else runs[::-1]:
                    r = {**_spawn(args, size, resp_len, option, bypass), "round": rnd}
                    results.append(r)
                    print(
                        json.dumps({k: v for k, v in r.items() if k not in ("times", "cpu_times")}),
                        flush=True,
                    )
    print(
        f"# end {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average "
        f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}"
    )
    print(table(summarise(results)))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
