"""The check's Markdown table, from its JSON report (``gpu_check.json`` -> ``gpu_check.md``).

    python scripts/gpucheck/tables.py docs/results/gpu_<card>_<date>.json   # print the table again
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return str(value)


def _table(header: list[str], rows: list[list[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_fmt(c) for c in row) + " |" for row in rows]
    return lines


def _first_line(text: str | None) -> str:
    return (text or "").strip().splitlines()[0][:160] if text and text.strip() else ""


def _diff(d: dict | None) -> str:
    if not d:
        return ""
    return f"max {d['max_abs_diff']:.3g}, mean {d['mean_abs_diff']:.3g}"


def header(report: dict) -> list[str]:
    m = report["sections"].get("machine", {}).get("checks", {})
    gpu, ver, src, mm = m.get("gpu", {}), m.get("versions", {}), m.get("source", {}), m.get("matmul", {})
    on_gpu = report["device"] == "cuda"
    card = f"{gpu.get('name', '?')}, driver {gpu.get('driver', '?')}, {gpu.get('memory_gib', '?')} GiB" if on_gpu \
        else f"{gpu.get('name', '?')} (CPU dry run: no GPU)"
    peak = gpu.get("dense_bf16_peak_tflops")
    lines = [f"# GPU check: {gpu.get('name', '?')}, {report['date']}", ""]
    lines += [f"- command: `{report['command']}`",
              f"- card: {card}; torch {gpu.get('torch', '?')} (CUDA {gpu.get('torch_cuda', '?')}), transformers "
              f"{ver.get('transformers', '?')}, trl {ver.get('trl', '?')}, megatron-core {ver.get('megatron-core', '?')}, "
              f"Python {ver.get('python', '?')}",
              f"- commit {src.get('commit') or '?'}{' (with uncommitted changes)' if src.get('dirty') else ''} "
              f"(from {src.get('from', '?')})",
              f"- wall time {report['seconds']:.0f} s of a {report['budget_s']:.0f} s budget; dense bf16 peak "
              f"{f'{peak:.0f} TFLOP/s (datasheet)' if peak else 'not known for this device'}; {mm.get('n', '?')}^3 "
              f"{mm.get('dtype', '?')} matmul measured at {mm.get('median_tflops', '?')} TFLOP/s", ""]
    return lines


def sections(report: dict) -> list[str]:
    setup = report.get("setup", {})
    rows = [["setup", "failed" if "error" in setup else "ok", setup.get("seconds"), "",
             setup.get("error") or setup.get("note") or f"{len(setup.get('wheels', []))} wheels installed"]]
    for name, s in report["sections"].items():
        failed = [k for k, v in s.get("checks", {}).items() if v.get("status") not in ("ok", "skipped")]
        note = s.get("error") or (f"failed: {', '.join(failed)}" if failed else "")
        if not note and s.get("status") not in ("ok",):
            note = _first_line(s.get("log_tail", "")[-300:])
        rows.append([name, s.get("status"), s.get("seconds"), s.get("limit_s"), note])
    return ["## Sections", ""] + _table(["section", "status", "seconds", "limit s", "note"], rows) + [""]


def correctness(report: dict) -> list[str]:
    checks = report["sections"].get("correctness", {}).get("checks", {})
    checks = {**checks, **report["sections"].get("megatron", {}).get("checks", {})}
    rows = []
    for name, c in checks.items():
        if c.get("status") != "ok":
            rows.append([name, c.get("status"), _first_line(c.get("error"))])
            continue
        if name.startswith("fsdp2_bf16"):
            text = (f"params {c['param_dtypes']}, compute {c['compute_dtype']}, fully_shard DTensors "
                    f"{c['fully_shard_dtensors']}; one AdamW step moved {c['fraction_of_weights_moved']:.1%} of the "
                    f"weights, {c['fraction_moved_by_less_than_half_a_bf16_step']:.1%} of those by < half a bf16 step; "
                    f"bf16 vs fp32 log-probs {_diff(c['log_probs_bf16_vs_fp32'])}")
        elif name.startswith("rollouts_"):
            text = (f"greedy native vs hf: {c['rows_identical']}/{c['rows']} rows identical; log-probs on the common "
                    f"prefix {_diff(c.get('log_probs_native_vs_hf_on_common_prefix'))}")
        elif name.startswith("rollout_vs_actor"):
            text = f"rollout vs actor log-probs on {c['n']} tokens: {_diff(c)}"
        elif name == "checkpoint_resume":
            text = (f"reload vs saved {_diff(c['reloaded_vs_saved'])}; fresh worker {_diff(c['fresh_worker_vs_saved'])}; "
                    f"step after reload vs after save {_diff(c['step_after_reload_vs_after_save'])}")
        elif name.startswith("megatron"):
            text = (f"log-probs before update {_diff(c['log_probs_before_update'])}, after {_diff(c['log_probs_after_update'])}; "
                    f"grad norm fsdp2 {c['grad_norm']['fsdp2']:.4g} / megatron {c['grad_norm']['megatron']:.4g}")
        else:
            continue
        rows.append([name, "ok", text])
    return ["## Correctness on the device", ""] + _table(["check", "status", "result"], rows) + [""]


def e2e(report: dict) -> list[str]:
    c = report["sections"].get("e2e", {}).get("checks", {}).get("demo_sft_then_grpo")
    if not c or c.get("status") != "ok":
        return ["## The addition task end to end", "", f"not measured: {_first_line((c or {}).get('error')) or 'see Sections'}", ""]
    lines = ["## The addition task end to end", "",
             f"{c['sft_steps']} SFT + {c['rl_steps']} GRPO steps on {c['device']}, {c['backend']}: held-out exact match "
             f"{c['held_out_start_of_rl']:.1%} -> {c['held_out_end_of_rl']:.1%}; {c['total_seconds']:.0f} s in all "
             f"(SFT {c['sft_seconds']:.0f} s, GRPO {c['grpo_seconds']:.0f} s, {c['rl_seconds_per_step_median']} s per GRPO step)."]
    ref = c.get("cpu_reference")
    if ref:
        lines.append(f"CPU reference ({ref['source']}; {ref['machine']}; {ref['setup']}): {ref['total_seconds']:.0f} s in all, "
                     f"GRPO {ref['grpo_seconds']:.0f} s; this run / that: {c['total_time_vs_cpu_reference']} in all, "
                     f"{c['grpo_time_vs_cpu_reference']} GRPO.")
    return lines + [""]


def speed(report: dict) -> list[str]:
    sec = report["sections"].get("speed", {})
    rows = []
    for shape, c in sec.get("checks", {}).items():
        if "lengths" not in c:
            rows.append([shape, "", "", c.get("status"), _first_line(c.get("error"))] + [""] * 9)
            continue
        for length, row in c["lengths"].items():
            for impl in ("ours", "trl"):
                r = row.get(impl, {})
                if "step_s" not in r:
                    rows.append([shape, length, impl, _first_line(r.get("status"))] + [""] * 10)
                    continue
                mem = r.get("peak_allocated_gib", r.get("peak_rss_gib_process"))
                rows.append([shape, length, impl, r["step_s"], r.get("gen_s"), r.get("train_s"),
                             r.get("gen_tokens_per_s"), r.get("train_tokens_per_s"), r.get("mfu"), r.get("gen_mfu"),
                             r.get("train_mfu"), mem, r.get("micro_rows"),
                             row.get("ours_over_trl_step") if impl == "ours" else ""])
    settings = sec.get("settings", {})
    lines = ["## Speed: one GRPO step, ours against TRL", "",
             f"64 sequences, prompt {settings.get('prompt_len')} tokens, fixed response lengths; bf16 compute on fp32 "
             f"masters (fp32 in the CPU dry run); MFU over the dense bf16 peak "
             f"({settings.get('dense_bf16_peak_tflops') or 'none on a CPU'} TFLOP/s); memory: peak "
             "allocated GiB on the GPU (peak RSS of the process on a CPU). The first step of a process warms it up and "
             "is left out (a length run later in the same process has no warm-up step).", ""]
    return lines + _table(["shape", "response", "impl", "step s", "gen s", "train s", "gen tok/s", "train tok/s",
                           "MFU", "gen MFU", "train MFU", "peak GiB", "micro rows", "ours / TRL"], rows) + [""]


def render(report: dict) -> str:
    return "\n".join(header(report) + sections(report) + correctness(report) + e2e(report) + speed(report))


if __name__ == "__main__":
    print(render(json.loads(Path(sys.argv[1]).read_text())))
