"""Section ``e2e``: the embedded addition task end to end on the device (``verl.trainer.demo``).

The demo's default schedule (180 SFT steps, then 60 GRPO steps validated every 10 on the 104 held-out
problems, greedy exact match), with ``--device`` and ``trainer.worker_backend=local`` for both stages
(one worker in this process: the GPU machine has no Ray). ``--quick`` runs 3 + 2 steps.

The CPU reference is docs/measurements.md's measurement (moved there from the README), quoted with its conditions, not re-run here.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from context import Context, Recorder

#: docs/measurements.md, "The main job": measured on the project's 2-core CPU machine, quiet, 2026-11-22
CPU_REFERENCE = {
    "source": "docs/measurements.md, 'The main job' (not measured by this check)",
    "machine": "the project's 2-core CPU machine, quiet, 2026-11-22",
    "setup": "Ray backend, 2 FSDP2 CPU workers, fp32; 180 SFT + 60 GRPO steps",
    "total_seconds": 66.0,
    "grpo_seconds": 27.0,
    "held_out_start_to_end": [0.308, 0.423],
}


def demo_run(ctx: Context) -> dict[str, Any]:
    from verl.trainer import demo

    sft_steps, rl_steps = (3, 2) if ctx.quick else (demo.DEFAULT_SFT_STEPS, demo.DEFAULT_RL_STEPS)
    local = ["trainer.worker_backend=local"]
    t0 = time.perf_counter()
    summary = demo.run(ctx.work / "demo", sft_steps=sft_steps, rl_steps=rl_steps, workers=1, extra_rl_args=local,
                       extra_sft_args=local, device=ctx.device)
    wall = time.perf_counter() - t0
    out = {
        "sft_steps": sft_steps, "rl_steps": rl_steps, "device": ctx.device, "backend": "local (1 worker, no Ray)",
        "held_out_start_of_rl": summary["val_exact_match_start_of_rl"],
        "held_out_end_of_rl": summary["val_exact_match_end_of_rl"], "held_out_curve": summary["val_curve"],
        "sft_seconds": summary["sft_seconds"], "total_seconds": round(wall, 1),
        "grpo_seconds": round(wall - summary["sft_seconds"], 1),
        "rl_seconds_per_step_median": summary["rl_seconds_per_step"],
        "ray_imported": "ray" in sys.modules,
    }
    if not ctx.quick:
        out["cpu_reference"] = CPU_REFERENCE
        out["total_time_vs_cpu_reference"] = round(out["total_seconds"] / CPU_REFERENCE["total_seconds"], 3)
        out["grpo_time_vs_cpu_reference"] = round(out["grpo_seconds"] / CPU_REFERENCE["grpo_seconds"], 3)
    assert not out["ray_imported"], "the local backend imported Ray"
    return out


def run(ctx: Context, rec: Recorder) -> None:
    rec.check("demo_sft_then_grpo", lambda: demo_run(ctx))
