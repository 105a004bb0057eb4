"""Section ``megatron``: Megatron-Core at TP=1 against FSDP2 on the same batch, on the device.

One process, world size 1: both engines load the same ``check`` model (``shapes.SHAPES``), and the
PPO actor (``DataParallelPPOActor``) over each computes the log-probs of one batch of 64 rows
(``benchmarks/engines.py``'s batch: 8 prompts x 8 samples, random response tokens), takes one update
on it, and computes them again. Reported per dtype: the log-prob difference before and after the
update, and the update's policy loss and gradient norm from each engine. fp32 runs everywhere; bf16
(compute, fp32 masters) only on CUDA, since the Megatron engine refuses bf16 on CPU.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from context import ROOT, Context, Recorder, tensor_diff

sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "benchmarks" / "grpo_step"))

NEW_TOKENS = 32
LR = 1e-5


def _join_world_of_one(device: str) -> None:
    from verl.single_controller.base.worker import get_free_port
    from verl.workers.fsdp_workers import init_distributed

    os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(get_free_port()))
    init_distributed(device, seed=1)


def _actor(model_dir: Path, strategy: str, dtype: str, rows: int):
    from engines import actor_overrides
    from verl.trainer.config import load_config
    from verl.workers.actor import DataParallelPPOActor
    from verl.workers.engine import build_engine

    overrides = [o for o in actor_overrides(model_dir, strategy, 1, rows) if "model_dtype" not in o and "optim.lr" not in o]
    overrides += [f"actor_rollout_ref.model.model_dtype={dtype}", f"actor_rollout_ref.actor.optim.lr={LR}"]
    cfg = load_config(overrides).actor_rollout_ref
    a = cfg.actor
    engine = build_engine(strategy, model_config=cfg.model,
                          engine_config=a.megatron if strategy == "megatron" else a.fsdp_config,
                          optim_config=a.optim, model_type="causal_lm", grad_clip=a.grad_clip,
                          total_training_steps=10, checkpoint_config=a.checkpoint)
    return DataParallelPPOActor(a, engine)


def compare(ctx: Context, model_dir: Path, dtype: str) -> dict[str, Any]:
    from engines import make_batch
    from verl.workers.tokenizer import hf_tokenizer

    data = make_batch(hf_tokenizer(str(model_dir)), NEW_TOKENS)
    rows = 16
    data.meta_info.update(micro_batch_size=rows, temperature=1.0, global_steps=1)
    actors = {name: _actor(model_dir, name, dtype, rows) for name in ("fsdp2", "megatron")}
    mask = data.batch["response_mask"]
    before = {n: a.compute_log_prob(data)[0] for n, a in actors.items()}
    metrics = {n: a.update_policy(data) for n, a in actors.items()}
    after = {n: a.compute_log_prob(data)[0] for n, a in actors.items()}
    out = {
        "rows": len(data), "response_tokens": NEW_TOKENS, "engine_devices": {n: str(a.engine.device) for n, a in actors.items()},
        "log_probs_before_update": tensor_diff(before["megatron"], before["fsdp2"], mask),
        "log_probs_after_update": tensor_diff(after["megatron"], after["fsdp2"], mask),
        "update_moved_fsdp2": tensor_diff(after["fsdp2"], before["fsdp2"], mask)["max_abs_diff"],
        "pg_loss": {n: float(m["actor/pg_loss"]) for n, m in metrics.items()},
        "grad_norm": {n: float(m["actor/grad_norm"]) for n, m in metrics.items()},
    }
    tolerance = 1e-3 if dtype == "float32" else 0.1
    worst = max(out["log_probs_before_update"]["max_abs_diff"], out["log_probs_after_update"]["max_abs_diff"])
    assert worst < tolerance, f"Megatron TP=1 and FSDP2 log-probs differ by {worst} ({dtype}; tolerance {tolerance})"
    g = out["grad_norm"]
    assert abs(g["megatron"] - g["fsdp2"]) <= 0.05 * abs(g["fsdp2"]) + 1e-6, f"gradient norms differ: {g}"
    return out


def run(ctx: Context, rec: Recorder) -> None:
    import shapes

    shape = "quick-a" if ctx.quick else "check"
    model_dir = shapes.build_model(ctx.work / "model", shape, device=ctx.device, save_dtype="float32")
    rec.set("model", shape)
    if rec.check("join a world of one", lambda: _join_world_of_one(ctx.device) or {"device": ctx.device}) is None:
        return
    for dtype in ("float32", "bfloat16") if ctx.device == "cuda" else ("float32",):
        rec.check(f"megatron_tp1_vs_fsdp2_{dtype}", lambda d=dtype: compare(ctx, model_dir, d))
