"""Training engines side by side: the time of one actor update, FSDP2 vs Megatron-Core (TP=1, TP=2).

    uv run python benchmarks/engines.py --size m --new-tokens 64 --reps 5 --out benchmarks/results/engines_m.md

One actor update is what ``ActorRolloutRefWorker.update_actor`` runs: ``DataParallelPPOActor.update_policy``
(forward + backward of the PPO clipped policy loss over the micro-batches, one optimizer step, one
LR-scheduler step) on an engine built with ``build_engine`` (``actor.strategy`` = ``fsdp2`` / ``megatron``),
the same public interfaces the FSDP and Megatron actor workers use.

Settings are the GRPO scaling curve's (``benchmarks/grpo_step``): the curve's model folder for the size
(``assets.ensure_model``), 64 rows = 8 prompts ``a+b=`` (4 tokens) x 8 samples, ``new_tokens`` response
tokens per row (random ids, every row full length, as with ``rollout.ignore_eos=true``), fp32, no
gradient checkpointing, one mini-batch (``ppo_mini_batch_size=8`` prompts), ``assets.micro_batch_rows``
rows per micro-batch, lr 1e-3 constant, grad_clip 1.0, no KL or entropy loss, old log-probs from the
rollout (``use_rollout_log_probs=true``: the update also computes the entropy metric, without grad).

Layouts, one spawned gloo group per world size (the machine's cores split evenly over the ranks):

- world 1: ``fsdp2`` and ``megatron`` TP=1;
- world 2: ``fsdp2`` data-parallel (32 rows per rank) and ``megatron`` TP=2 (sequence parallel on,
  both ranks see all 64 rows).

Both engines of a world live in the same processes and alternate: each rep times both back to back,
alternating which goes first; ``--warmup`` reps are dropped. A rep's time is the slowest rank's
(barrier, update, all-reduce MAX). The table shows the median, min and max over reps and the median of
the per-rep ratio megatron / fsdp2 of the same world.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE / "grpo_step"))

import assets  # noqa: E402
from md_table import markdown_table, write_report  # noqa: E402

PROMPTS, SAMPLES = 8, 8
LR = 1e-3
COLUMNS = [
    "size",
    "new tokens",
    "engine",
    "layout",
    "ranks x threads",
    "update s (median)",
    "min s",
    "max s",
    "megatron / fsdp2 (same ranks)",
]


def layouts(world: int) -> list[tuple[str, str, int]]:
    """``(engine, layout label, tensor-parallel size)`` of the engines timed together at ``world`` ranks."""
    if world == 1:
        return [("fsdp2", "DP=1", 1), ("megatron", "TP=1", 1)]
    if world == 2:
        return [("fsdp2", "DP=2", 1), ("megatron", "TP=2", 2)]
    raise ValueError(f"--worlds: {world} ranks is not a layout here; use 1 or 2")


def actor_overrides(model_dir: str | os.PathLike, strategy: str, tp: int, micro_batch: int) -> list[str]:
    """``key=value`` config overrides of one engine (the curve's actor settings, see the module doc)."""
    if strategy not in ("fsdp2", "megatron"):
        raise ValueError(f"strategy {strategy!r}: use fsdp2 or megatron")
    if strategy == "fsdp2" and tp != 1:
        raise ValueError(f"fsdp2 has no tensor parallelism (tp={tp}); use tp=1")
    prefix = "actor_rollout_ref.actor"
    out = [
        f"actor_rollout_ref.model.path={model_dir}",
        "actor_rollout_ref.model.enable_gradient_checkpointing=false",
        "actor_rollout_ref.model.model_dtype=float32",
        f"{prefix}.strategy={strategy}",
        f"{prefix}.ppo_mini_batch_size={PROMPTS}",  # one optimizer step per update
        f"{prefix}.ppo_micro_batch_size_per_gpu={micro_batch}",
        f"{prefix}.ppo_epochs=1",
        f"{prefix}.optim.lr={LR}",
        f"{prefix}.optim.lr_scheduler_type=constant",
        f"{prefix}.grad_clip=1.0",
        f"{prefix}.use_kl_loss=false",
        f"{prefix}.entropy_coeff=0.0",
        f"{prefix}.use_rollout_log_probs=true",
    ]
    if strategy == "megatron":
        out.append(f"{prefix}.megatron.tensor_model_parallel_size={tp}")
    return out


def make_batch(tokenizer, new_tokens: int, seed: int = 0):
    """64 rows of the curve's task: chat prompts ``a+b=`` x 8 samples, ``new_tokens`` random response ids,
    random rollout log-probs (old log-probs) and GRPO-like advantages (one per row)."""
    import torch
    from verl.workers.engine.testing import chat_prompt_batch

    g = torch.Generator().manual_seed(seed)
    problems = assets.all_problems()
    picks = torch.randperm(len(problems), generator=g)[:PROMPTS].tolist()
    data = chat_prompt_batch(tokenizer, [f"{problems[i][0]}+{problems[i][1]}=" for i in picks], n=SAMPLES)
    rows = len(data)
    special = {tokenizer.pad_token_id, tokenizer.eos_token_id}
    allowed = torch.tensor([i for i in range(len(tokenizer)) if i not in special])
    responses = allowed[torch.randint(0, len(allowed), (rows, new_tokens), generator=g)]
    response_mask = torch.ones(rows, new_tokens, dtype=torch.long)
    attention_mask = torch.cat([data.batch["attention_mask"], response_mask], dim=1)
    data.batch["prompts"] = data.batch["input_ids"]
    data.batch["responses"] = responses
    data.batch["input_ids"] = torch.cat([data.batch["input_ids"], responses], dim=1)
    data.batch["attention_mask"] = attention_mask
    data.batch["position_ids"] = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    data.batch["response_mask"] = response_mask
    data.batch["old_log_probs"] = -torch.rand(rows, new_tokens, generator=g) * 3 - 1
    data.batch["advantages"] = torch.randn(rows, 1, generator=g).expand(rows, new_tokens).contiguous()
    data.meta_info.update(temperature=1.0, rows_per_prompt=SAMPLES)
    return data


def _build_actor(model_dir: str, strategy: str, tp: int, micro_batch: int):
    from verl.trainer.config import load_config
    from verl.workers.actor import DataParallelPPOActor
    from verl.workers.engine import build_engine

    cfg = load_config(
        actor_overrides(model_dir, strategy, tp, micro_batch)).actor_rollout_ref
    actor_cfg = cfg.actor
    engine = build_engine(
        strategy,
        model_config=cfg.model,
        engine_config=actor_cfg.megatron if strategy == "megatron" else actor_cfg.fsdp_config,
        optim_config=actor_cfg.optim,
        model_type="causal_lm",
        grad_clip=actor_cfg.grad_clip,
        total_training_steps=1000,
        checkpoint_config=actor_cfg.checkpoint,
    )
    return DataParallelPPOActor(actor_cfg, engine)


def _rank_job(
    rank: int,
    world: int,
    model_dir: str,
    new_tokens: int,
    micro_batch: int,
    reps: int,
    warmup: int,
    threads: int,
    out_file: str,
) -> None:
    """One rank: build both engines of this world, then time alternating updates."""
    import torch
    import torch.distributed as dist
    from verl.workers.tokenizer import hf_tokenizer

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    data = make_batch(hf_tokenizer(model_dir), new_tokens)
    actors = {name: _build_actor(model_dir, name, tp, micro_batch) for name, _, tp in layouts(world)}
    times: dict[str, list[float]] = {name: [] for name in actors}
    for rep in range(warmup + reps):
        order = list(actors) if rep % 2 == 0 else list(reversed(actors))
        for name in order:
            engine = actors[name].engine
            shard = data.chunk(engine.dp_size)[engine.dp_rank] if engine.dp_size > 1 else data
            shard.meta_info["global_steps"] = rep
            dist.barrier()
            t0 = time.perf_counter()
            actors[name].update_policy(shard)
            elapsed = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
            dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
            if rep >= warmup:
                times[name].append(float(elapsed))
    if rank == 0:
        with open(out_file, "w") as f:
            json.dump({"times": times, "threads": threads}, f)


def summarize(
    size: str, new_tokens: int, world: int, threads: int, times: dict[str, list[float]]
) -> list[list[str]]:
    """Table rows of one world: one per engine, ratios from the reps timed back to back."""
    rows = []
    ratios = [m / f for f, m in zip(times["fsdp2"], times["megatron"], strict=True)]
    for name, label, _ in layouts(world):
        t = times[name]
        ratio = "1 (baseline)" if name == "fsdp2" else f"{statistics.median(ratios):.2f}x"
        rows.append(
            [
                size,
                str(new_tokens),
                name,
                label,
                f"{world} x {threads}",
                f"{statistics.median(t):.3f}",
                f"{min(t):.3f}",
                f"{max(t):.3f}",
                ratio,
            ]
        )
    return rows


def main(argv: list[str] | None = None) -> list[list[str]]:
    from verl.workers.engine.testing import run_gloo

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="m", choices=sorted(assets.SIZES))
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--worlds", nargs="+", type=int, default=[1, 2], help="ranks per run (1 and/or 2)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--cores", type=int, default=os.cpu_count() or 1, help="threads split over the ranks")
    ap.add_argument(
        "--models", default=None, help="folder for the curve's model folders (default: a temp dir)"
    )
    ap.add_argument("--out", default=None, help="write the markdown table (with its settings) here")
    args = ap.parse_args(argv)
    if args.reps < 1 or args.warmup < 0 or args.new_tokens < 1:
        ap.error(
            f"--reps {args.reps} must be >= 1, --warmup {args.warmup} >= 0, --new-tokens {args.new_tokens} >= 1"
        )
    for w in args.worlds:
        layouts(w)  # refuse an unknown world before spawning anything
    micro = assets.micro_batch_rows(args.size, args.new_tokens)
    rows: list[list[str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = str(assets.ensure_model(args.size, Path(args.models or tmp)))
        for world in args.worlds:
            threads = max(1, args.cores // world)
            out_file = os.path.join(tmp, f"world{world}.json")
            t0 = time.perf_counter()
            run_gloo(
                _rank_job,
                world,
                tmp,
                model_dir,
                args.new_tokens,
                micro,
                args.reps,
                args.warmup,
                threads,
                out_file,
            )
            with open(out_file) as f:
                result = json.load(f)
            rows += summarize(args.size, args.new_tokens, world, threads, result["times"])
            print(f"world {world}: {time.perf_counter() - t0:.0f} s wall", flush=True)
    table = markdown_table(COLUMNS, rows)
    print(table, end="")
    if args.out:
        notes = [
            f"`benchmarks/engines.py --size {args.size} --new-tokens {args.new_tokens} --reps {args.reps} "
            f"--warmup {args.warmup}`, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
            f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the end.",
            f"{PROMPTS * SAMPLES} rows x (4 prompt + {args.new_tokens} response tokens), fp32, "
            f"{micro} rows per micro-batch, one optimizer step; median over {args.reps} reps after "
            f"{args.warmup} warm-up, engines alternating.",
        ]
        write_report(args.out, "Training engines: one actor update", notes, table)
    return rows


if __name__ == "__main__":
    main()
