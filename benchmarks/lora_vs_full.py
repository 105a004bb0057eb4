"""LoRA vs full fine-tuning of the actor on the same model: trainable parameters, optimizer state, peak memory.

    uv run python benchmarks/lora_vs_full.py [--size s] [--rank 8] [--steps 4] [--rounds 2]

Both sides run the actor's training pass as ``ActorRolloutRefWorker`` runs it: config from
``load_config`` + ``validate_config``, ``build_engine("fsdp2", ...)`` (world size 1 on gloo), and
``DataParallelPPOActor.update_policy`` on a synthetic GRPO batch (64 rows x (4 prompt + 64 response)
tokens, one AdamW step per update). The LoRA side sets ``actor_rollout_ref.model.lora_rank`` (alpha =
2 x rank, target_modules=all-linear); everything else is identical. Every run is a fresh process, so
``ru_maxrss`` is that run's alone; "train peak" = peak RSS minus the RSS just before the first update
(what training adds to the loaded model: activations, gradients, optimizer state). Parameter and
optimizer-state counts are exact; memory and time vary with the machine's load, so the sides alternate
over ``--rounds`` and ratios are medians of per-round ratios. Times are process CPU seconds per update.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time


def _rss_kib() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


def child(model_dir: str, rank: int, steps: int, rows: int = 64, response_len: int = 64) -> dict:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    store = tempfile.mktemp(prefix="lora_bench_store_")
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    from verl.trainer.config import load_config, validate_config
    from verl.workers.actor import DataParallelPPOActor
    from verl.workers.engine.testing import actor_engine, make_rl_batch

    cfg = load_config(
        [
            f"actor_rollout_ref.model.path={model_dir}",
            "data.train_files=unused.parquet",
            "actor_rollout_ref.model.enable_gradient_checkpointing=false",
            f"actor_rollout_ref.model.lora_rank={rank}",
            f"actor_rollout_ref.model.lora_alpha={2 * max(rank, 1)}",
            f"actor_rollout_ref.actor.ppo_mini_batch_size={rows // 2}",
            f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={rows}",
            "actor_rollout_ref.rollout.n=2",
            f"data.train_batch_size={rows // 2}",
            "trainer.device=cpu",
            "trainer.n_gpus_per_node=1",
            "actor_rollout_ref.actor.optim.lr=1e-4",
        ],
    )
    validate_config(cfg)
    arr = cfg.actor_rollout_ref
    engine = actor_engine(arr, steps, grad_clip=1.0)
    actor = DataParallelPPOActor(arr.actor, engine, ppo_mini_batch_size_per_rank=rows)
    data = make_rl_batch(n=rows, prompt_len=4, response_len=response_len, vocab=60, seed=0)
    params = list(engine.module.parameters())
    before = _rss_kib()
    times = []
    for _ in range(steps):
        t = time.process_time()
        actor.update_policy(data)
        times.append(time.process_time() - t)
    opt_bytes = sum(
        v.numel() * v.element_size()
        for s in engine.optimizer.state.values()
        for v in s.values()
        if torch.is_tensor(v) and v.dim() > 0
    )
    return {
        "total_params": sum(p.numel() for p in params),
        "trainable_params": sum(p.numel() for p in params if p.requires_grad),
        "optimizer_state_MiB": opt_bytes / 2**20,
        "peak_rss_MiB": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "train_peak_MiB": (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024,
        "cpu_s_per_update": statistics.median(times[1:] or times),
    }


def _build_model(out_dir: str, size: str, hidden: int | None, layers: int | None) -> None:
    """A random-init Qwen2 with the char tokenizer (verl.workers.tiny), optionally widened/deepened."""
    import torch
    from transformers import Qwen2ForCausalLM
    from verl.workers.tiny import build_char_tokenizer, tiny_qwen2_config

    tok = build_char_tokenizer(out_dir)
    config = tiny_qwen2_config(size, vocab_size=len(tok))
    if hidden is not None:
        config.hidden_size, config.intermediate_size = hidden, 4 * hidden
    if layers is not None:
        config.num_hidden_layers = layers
    torch.manual_seed(0)
    Qwen2ForCausalLM(config).save_pretrained(out_dir)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="s", help="tiny model size (verl.workers.tiny.SIZES)")
    ap.add_argument("--rank", type=int, default=8)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument(
        "--hidden", type=int, default=None, help="override the model's hidden size (intermediate = 4x)"
    )
    ap.add_argument("--layers", type=int, default=None, help="override the number of layers")
    ap.add_argument("--rows", type=int, default=64, help="trajectories per update")
    ap.add_argument("--response-len", type=int, default=64)
    ap.add_argument(
        "--child", nargs=5, metavar=("MODEL", "RANK", "STEPS", "ROWS", "RLEN"), help=argparse.SUPPRESS
    )
    args = ap.parse_args()
    if args.child:
        model, *nums = args.child
        print("RESULT " + json.dumps(child(model, *map(int, nums))))
        return
    model_dir = tempfile.mkdtemp(prefix="lora_bench_model_")
    _build_model(model_dir, args.size, args.hidden, args.layers)
    sides = {"full": 0, f"lora r={args.rank}": args.rank}
    results: dict[str, list[dict]] = {name: [] for name in sides}
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for r in range(args.rounds):
        order = list(sides) if r % 2 == 0 else list(sides)[::-1]
        for name in order:
            out = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--child",
                    model_dir,
                    str(sides[name]),
                    str(args.steps),
                    str(args.rows),
                    str(args.response_len),
                ],
                capture_output=True,
                text=True,
                env=env,
                check=True,
            ).stdout
            results[name].append(json.loads(out.split("RESULT ", 1)[1]))
            print(f"round {r + 1}: {name} done", file=sys.stderr)
    keys = list(results["full"][0])
    print(
        f"model: tiny Qwen2 '{args.size}' hidden={args.hidden} layers={args.layers}; {args.rows} rows x "
        f"(4 + {args.response_len}) tokens; {args.steps} updates per run, {args.rounds} alternating rounds"
    )
    print(f"{'metric':<22}" + "".join(f"{n:>16}" for n in sides) + f"{'lora/full':>12}")
    lora = list(sides)[1]
    for k in keys:
        med = {n: statistics.median(x[k] for x in results[n]) for n in sides}
        ratio = statistics.median(a[k] / b[k] for a, b in zip(results[lora], results["full"]) if b[k])
        print(f"{k:<22}" + "".join(f"{med[n]:>16.4g}" for n in sides) + f"{ratio:>12.3f}")


if __name__ == "__main__":
    main()
