"""Section ``speed``: one GRPO step at a real size, ours against TRL's ``GRPOTrainer``, alternating.

Shapes: Qwen2.5-0.5B, then Qwen2.5-1.5B (random weights, ``shapes.SHAPES``); per shape our process
(``speed_ours.py``) then TRL's (``speed_trl.py``), each running prompt 256 + response 256, then 1024
tokens for 64 sequences (``speed_common``). Every process has a deadline carved from the section's time
(ours 45% of what the shape gets, TRL the rest; the first shape 40% of the section, the second what is
left); a process stopped at its deadline keeps the lengths it finished.

Reported per (shape, length, implementation): step time and its stages, generation tokens/s (response
tokens over generation time), training tokens/s (prompt + response tokens over the update's time; TRL:
the step less its generation), MFU (counted matmul FLOPs, ``benchmarks/grpo_step/flops.py``, over time
and the card's dense bf16 peak; also over the matrix product this run measured), peak device memory;
and ours / TRL per length. ``--quick``: toy shapes and lengths, the same code.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from context import ROOT, Context, Recorder
from procs import run_child

sys.path.insert(0, str(ROOT / "benchmarks" / "grpo_step"))

HERE = Path(__file__).resolve().parent
FULL = {"shapes": [("qwen2.5-0.5b", 0.4), ("qwen2.5-1.5b", 1.0)], "prompt_len": 256, "lengths": [256, 1024]}
QUICK = {"shapes": [("quick-a", 1.0)], "prompt_len": 16, "lengths": [8, 16]}
OURS_SHARE = 0.45
RESERVE_S = 5.0


def _flops(shape: dict, prompt_len: int, length: int, rows: int) -> dict[str, float]:
    import shapes
    from flops import step_flops

    return step_flops(shapes.flops_shape(shape), shape["vocab_size"], rows, prompt_len, length, old_log_prob=False)


def summarize(impl: str, entry: dict, shape: dict, prompt_len: int, rows: int, peak_tflops: float | None,
              matmul_tflops: float | None) -> dict[str, Any]:
    """The measured step (the last of the length) with its rates."""
    if "steps" not in entry or not entry["steps"]:
        return {"status": entry.get("status", "no steps recorded")}
    step = entry["steps"][-1]
    length = entry["length"]
    gen_s = step.get("gen_s")
    train_s = step.get("update_actor_s") if impl == "ours" else (step["step_s"] - gen_s if gen_s is not None else None)
    f = _flops(shape, prompt_len, length, rows)
    out = {"step_s": round(step["step_s"], 3), "first_step_s": round(entry["steps"][0]["step_s"], 3),
           "steps_run": len(entry["steps"]), "setup_s": entry["setup_s"], "micro_rows": entry["micro_rows"],
           "response_tokens": step.get("response_tokens"),
           **{k: v for k, v in entry.items() if k.startswith("peak_") or k == "generation_q_proj_dtypes"}}
    out.update({k: round(v, 3) for k, v in step.items() if k.endswith("_s") and k != "step_s"})
    if gen_s:
        out["gen_tokens_per_s"] = round(rows * length / gen_s, 1)
    if train_s:
        out["train_s"] = round(train_s, 3)
        out["train_tokens_per_s"] = round(rows * (prompt_len + length) / train_s, 1)
    for label, peak in (("mfu", peak_tflops), ("mfu_of_measured_matmul", matmul_tflops)):
        if peak:
            out[label] = round(f["total"] / step["step_s"] / (peak * 1e12), 4)
            if gen_s:
                out[f"gen_{label}"] = round(f["gen"] / gen_s / (peak * 1e12), 4)
            if train_s:
                out[f"train_{label}"] = round(3 * f["forward"] / train_s / (peak * 1e12), 4)
    out["step_tflop"] = round(f["total"] / 1e12, 3)
    return out


def run_shape(ctx: Context, rec: Recorder, name: str, budget_s: float, plan: dict, peak: float | None,
              matmul: float | None) -> dict[str, Any]:
    import shapes
    from speed_common import Cell, micro_rows

    shape = shapes.SHAPES[name]
    start = time.time()
    model_dir = shapes.build_model(ctx.work / name, name, device=ctx.device, save_dtype="bfloat16")
    data = shapes.write_prompt_rows(ctx.work / f"{name}_prompts.parquet", shapes.prompt_texts(64, plan["prompt_len"]))
    built = time.time() - start
    cell = Cell(shape=name, model_dir=str(model_dir), data_file=data, prompt_len=plan["prompt_len"],
                lengths=plan["lengths"], device=ctx.device, dtype="bfloat16" if ctx.device == "cuda" else "float32",
                micro_rows={n: micro_rows(shape, plan["prompt_len"], n) for n in plan["lengths"]})
    end = start + budget_s
    raw: dict[str, Any] = {}
    for impl, until in (("ours", start + built + OURS_SHARE * (budget_s - built)), ("trl", end)):
        out_file = ctx.work / f"{name}_{impl}.json"
        cmd = [sys.executable, str(HERE / f"speed_{impl}.py"), "--cell", json.dumps(asdict(cell)),
               "--json", str(out_file), "--deadline", str(until - 10)]
        child = run_child(cmd, ctx.work / f"{name}_{impl}.log", limit_s=max(until - time.time(), 1))
        raw[impl] = json.loads(out_file.read_text()) if out_file.exists() else {}
        raw[impl]["process"] = child
    table: dict[str, Any] = {"params": shapes.param_count(shape), "build_s": round(built, 1), "lengths": {}}
    for length in plan["lengths"]:
        row = {}
        for impl in ("ours", "trl"):
            entry = raw[impl].get("lengths", {}).get(str(length))
            if entry is None:
                status = raw[impl]["process"]["status"]
                row[impl] = {"status": f"not run (process {status})", "log_tail": raw[impl]["process"].get("log_tail", "")}
            else:
                row[impl] = summarize(impl, entry, shape, plan["prompt_len"], 64, peak, matmul)
        if "step_s" in row["ours"] and "step_s" in row["trl"]:
            row["ours_over_trl_step"] = round(row["ours"]["step_s"] / row["trl"]["step_s"], 3)
        table["lengths"][str(length)] = row
    table["failures"] = [f"{impl}: {raw[impl]['process']['status']}" for impl in ("ours", "trl")
                         if raw[impl]["process"]["status"] != "ok"]
    return table


def run(ctx: Context, rec: Recorder) -> None:
    from sec_machine import peak_tflops

    plan = QUICK if ctx.quick else FULL
    peak = None
    if ctx.device == "cuda":
        import torch

        peak = peak_tflops(torch.cuda.get_device_name(0))
    matmul = float(ctx.options["matmul_tflops"]) if ctx.options.get("matmul_tflops") else None
    rec.set("settings", {"prompt_len": plan["prompt_len"], "lengths": plan["lengths"], "sequences": 64,
                         "dense_bf16_peak_tflops": peak, "measured_matmul_tflops": matmul})
    for name, share in plan["shapes"]:
        budget = share * (ctx.seconds_left() - RESERVE_S)
        if budget < 30:
            rec.data["checks"][name] = {"status": "skipped", "error": f"{budget:.0f} s of budget left for it"}
            rec.flush()
            continue
        rec.check(name, lambda n=name, b=budget: run_shape(ctx, rec, n, b, plan, peak, matmul))
