"""Section ``correctness``: the actor/rollout worker on the device, checked against itself and fp32.

Everything goes through ``ActorRolloutRefWorker`` in this process (what ``trainer.worker_backend=local``
runs: world size 1, NCCL on CUDA, gloo on CPU), on the ``check`` model (``shapes.SHAPES``):

- ``fsdp2_bf16_fp32_masters``: with ``model_dtype=bfloat16`` the engine keeps fp32 parameters (sharded
  DTensors under ``fully_shard`` on CUDA), and one AdamW step at lr 1e-5 moves them by less than half a
  bf16 step (what bf16 weights would lose) yet moves most of them; log-probs in bf16 against fp32 on the
  same weights and tokens;
- ``rollouts_<dtype>``: the ``native`` and ``hf`` rollouts decode greedily on the device from the same
  weights: how many rows agree token for token, and their log-probs on the common prefix;
- ``rollout_vs_actor_<engine>_<dtype>``: the log-probs the rollout returns (``calculate_log_probs``)
  against the actor's recomputation on the same sampled tokens (max and mean absolute difference);
- ``checkpoint_resume``: save, train, load; the reloaded actor reproduces the saved log-probs, a fresh
  worker loading the same checkpoint does too, and the step after the reload repeats the first.
"""

from __future__ import annotations

import gc
import math
from pathlib import Path
from typing import Any

from context import Context, Recorder, synchronize, tensor_diff

LR = 1e-5


def _config(model_dir: Path, dtype: str, rollout: str, response_len: int, rows: int):
    from verl.trainer.config import load_config

    return load_config([
        f"actor_rollout_ref.model.path={model_dir}", f"actor_rollout_ref.model.model_dtype={dtype}",
        "actor_rollout_ref.model.enable_gradient_checkpointing=false", "data.train_batch_size=2",
        "data.max_prompt_length=64", f"data.max_response_length={response_len}",
        f"actor_rollout_ref.rollout.name={rollout}", "actor_rollout_ref.rollout.n=1",
        "actor_rollout_ref.rollout.calculate_log_probs=true", "actor_rollout_ref.rollout.temperature=1.0",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={rows}", f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={rows}",
        f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={rows}",
        f"actor_rollout_ref.actor.optim.lr={LR}", "actor_rollout_ref.actor.optim.lr_scheduler_type=constant",
        "actor_rollout_ref.actor.optim.weight_decay=0.0", "actor_rollout_ref.actor.use_kl_loss=false",
        "actor_rollout_ref.actor.entropy_coeff=0.0",
    ])


def _worker(ctx: Context, model_dir: Path, dtype: str, rollout: str = "native", response_len: int = 16, rows: int = 8):
    from verl.workers.fsdp_workers import ActorRolloutRefWorker

    cfg = _config(model_dir, dtype, rollout, response_len, rows)
    w = ActorRolloutRefWorker(cfg.actor_rollout_ref, role="actor_rollout", total_training_steps=10,
                              device=ctx.device, seed=1)
    w.init_model()
    return w


def _prompts(model_dir: Path, rows: int, do_sample: bool):
    import shapes
    from verl.workers.engine.testing import chat_prompt_batch
    from verl.workers.tokenizer import hf_tokenizer

    texts = shapes.prompt_texts(rows, 12, seed=3)
    texts = [t[: 4 + (i * 5) % 9] for i, t in enumerate(texts)]  # 4 to 12 tokens: left padding in play
    return chat_prompt_batch(hf_tokenizer(str(model_dir)), texts, meta={"do_sample": do_sample, "temperature": 1.0})


def _train_step(w, gen) -> dict[str, float]:
    import torch

    keys = ["prompts", "responses", "response_mask", "input_ids", "attention_mask", "position_ids"]
    batch = gen.select(batch_keys=keys)
    batch.meta_info["temperature"] = 1.0
    batch = batch.union(w.compute_log_prob(batch))
    signs = torch.tensor([1.0 if i % 2 == 0 else -1.0 for i in range(len(batch))]).unsqueeze(1)
    batch.batch["advantages"] = signs * batch.batch["response_mask"]
    metrics = w.update_actor(batch).meta_info["metrics"]
    return {k: float(v) for k, v in metrics.items() if k in ("actor/pg_loss", "actor/grad_norm")}


def _old_log_probs(w, gen):
    gen.meta_info["temperature"] = 1.0
    return w.compute_log_prob(gen).batch["old_log_probs"]


def _free() -> None:
    """Give the device memory of the workers the caller dropped back before the next one is built."""
    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def fsdp2_bf16_masters(ctx: Context, model_dir: Path) -> dict[str, Any]:
    from torch.distributed.tensor import DTensor

    w = _worker(ctx, model_dir, "bfloat16")
    engine = w.actor_engine
    params = list(engine.module.parameters())
    out: dict[str, Any] = {
        "param_dtypes": sorted({str(p.dtype) for p in params}),
        "compute_dtype": str(engine.precision.param_dtype),
        "fully_shard_dtensors": all(isinstance(p, DTensor) for p in params),
        "device": str(engine.device),
    }
    assert out["param_dtypes"] == ["torch.float32"], f"bf16 run keeps {out['param_dtypes']} parameters, not fp32 masters"
    if ctx.device == "cuda":
        assert out["fully_shard_dtensors"], "on CUDA the FSDP2 engine should hold fully_shard DTensors"
    gen = w.generate_sequences(_prompts(model_dir, 8, do_sample=True))
    before = engine.full_state_dict()
    out.update(_train_step(w, gen))
    after = engine.full_state_dict()
    changed = half_ulp_moves = total = 0
    for name, b in before.items():
        delta = (after[name] - b).abs()
        # half the spacing of bf16 numbers at each weight: a bf16 weight rounds any smaller update away
        spacing = (b.abs().clamp_min(1e-30).log2().floor() - 7).exp2()
        changed += int((delta > 0).sum())
        half_ulp_moves += int(((delta > 0) & (delta < spacing / 2)).sum())
        total += b.numel()
    out["fraction_of_weights_moved"] = round(changed / total, 4)
    out["fraction_moved_by_less_than_half_a_bf16_step"] = round(half_ulp_moves / max(changed, 1), 4)
    assert changed / total > 0.5, f"only {changed}/{total} weights moved in one AdamW step"
    bf16_lp = _old_log_probs(w, gen)
    del engine, w, params
    _free()
    w32 = _worker(ctx, model_dir, "float32")
    w32.actor_engine.load_full_state_dict(after)
    fp32_lp = _old_log_probs(w32, gen)
    out["log_probs_bf16_vs_fp32"] = tensor_diff(bf16_lp, fp32_lp, gen.batch["response_mask"])
    del w32
    _free()
    return out


def rollouts_agree(ctx: Context, model_dir: Path, dtype: str) -> dict[str, Any]:
    import torch
    from verl.workers.rollout import build_rollout

    w = _worker(ctx, model_dir, dtype, rollout="native")
    prompts = _prompts(model_dir, 8, do_sample=False)
    native = w.generate_sequences(prompts)
    hf = build_rollout("hf", module=w.actor_engine.module, config=w.config.rollout, tokenizer=w.tokenizer,
                       model_config=w.config.model, device=w.actor_engine.device)
    hf_out = hf.generate_sequences(prompts)
    a, b = native.batch["responses"], hf_out.batch["responses"]
    same_rows = [bool(torch.equal(x, y)) for x, y in zip(a, b)]
    # positions before the first disagreement of each row: the log-probs there saw the same tokens
    prefix = torch.zeros_like(a, dtype=torch.bool)
    for i in range(a.shape[0]):
        differ = (a[i] != b[i]).nonzero()
        n = int(differ[0]) if len(differ) else a.shape[1]
        prefix[i, :n] = True
    prefix &= native.batch["response_mask"].bool() & hf_out.batch["response_mask"].bool()
    out = {"rows": len(same_rows), "rows_identical": sum(same_rows),
           "positions_agreeing_before_first_difference": int(prefix.sum()), "positions": int(a.numel()),
           "outputs_on_cpu": all(v.device.type == "cpu" for v in native.batch.values())}
    if prefix.any():
        out["log_probs_native_vs_hf_on_common_prefix"] = tensor_diff(
            native.batch["rollout_log_probs"], hf_out.batch["rollout_log_probs"], prefix)
    del hf, w
    _free()
    assert out["outputs_on_cpu"], "rollout outputs must come back on the CPU"
    return out


def rollout_vs_actor(ctx: Context, model_dir: Path, engine: str, dtype: str) -> dict[str, Any]:
    w = _worker(ctx, model_dir, dtype, rollout=engine, response_len=32)
    gen = w.generate_sequences(_prompts(model_dir, 8, do_sample=True))
    diff = tensor_diff(gen.batch["rollout_log_probs"], _old_log_probs(w, gen), gen.batch["response_mask"])
    del w
    _free()
    assert not diff["nan"] and math.isfinite(diff["max_abs_diff"]), f"non-finite log-probs: {diff}"
    if dtype == "float32":
        assert diff["max_abs_diff"] < 1e-2, f"fp32 rollout and actor log-probs differ by {diff['max_abs_diff']}"
    return diff


def checkpoint_resume(ctx: Context, model_dir: Path) -> dict[str, Any]:
    w = _worker(ctx, model_dir, "bfloat16")
    gen = w.generate_sequences(_prompts(model_dir, 8, do_sample=True))
    _train_step(w, gen)
    path = str(ctx.work / "ckpt" / "global_step_1" / "actor")
    synchronize(ctx.device)
    w.save_checkpoint(path, global_step=1)
    saved = _old_log_probs(w, gen)
    step_after_save = _train_step(w, gen)
    trained = _old_log_probs(w, gen)
    w.load_checkpoint(path)
    reloaded = _old_log_probs(w, gen)
    step_after_reload = _train_step(w, gen)
    retrained = _old_log_probs(w, gen)
    del w
    _free()
    fresh = _worker(ctx, model_dir, "bfloat16")
    fresh.load_checkpoint(path)
    fresh_lp = _old_log_probs(fresh, gen)
    del fresh
    _free()
    mask = gen.batch["response_mask"]
    out = {"reloaded_vs_saved": tensor_diff(reloaded, saved, mask),
           "fresh_worker_vs_saved": tensor_diff(fresh_lp, saved, mask),
           "training_moved_them": tensor_diff(trained, saved, mask),
           "step_after_reload_vs_after_save": tensor_diff(retrained, trained, mask),
           "pg_loss_after_save_and_after_reload": [step_after_save["actor/pg_loss"], step_after_reload["actor/pg_loss"]]}
    assert out["training_moved_them"]["max_abs_diff"] > 0, "the update did not change the log-probs"
    assert out["reloaded_vs_saved"]["max_abs_diff"] < 1e-5, f"reload does not restore the weights: {out['reloaded_vs_saved']}"
    assert out["fresh_worker_vs_saved"]["max_abs_diff"] < 1e-5, f"a fresh worker does not load them: {out['fresh_worker_vs_saved']}"
    return out


def run(ctx: Context, rec: Recorder) -> None:
    import shapes

    model_dir = shapes.build_model(ctx.work / "model", "quick-a" if ctx.quick else "check", device=ctx.device,
                                   save_dtype="float32")
    rec.set("model", {"shape": "quick-a" if ctx.quick else "check", "path": str(model_dir)})
    rec.check("fsdp2_bf16_fp32_masters", lambda: fsdp2_bf16_masters(ctx, model_dir))
    # --quick (the CPU dry run) walks each check's code once, in the dtype a GPU run trains in
    dtypes = ("bfloat16",) if ctx.quick else ("float32", "bfloat16")
    for dtype in dtypes:
        rec.check(f"rollouts_{dtype}", lambda d=dtype: rollouts_agree(ctx, model_dir, d))
    for engine in ("native", "hf"):
        for dtype in dtypes:
            rec.check(f"rollout_vs_actor_{engine}_{dtype}", lambda e=engine, d=dtype: rollout_vs_actor(ctx, model_dir, e, d))
    rec.check("checkpoint_resume", lambda: checkpoint_resume(ctx, model_dir))
