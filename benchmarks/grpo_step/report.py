"""Medians, ratios, MFU and the markdown tables of the GRPO-step benchmark (from ``cell.py`` records)."""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any

import flops

ROWS_PER_STEP = 64
# Our trainer's per-stage timers (``timing_s/<stage>``), in loop order.
OUR_STAGES = (
    "gen",
    "reward",
    "filter",
    "old_log_prob",
    "ref",
    "values",
    "adv",
    "update_critic",
    "update_actor",
)


def _med(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def summarize(cell: dict, size: str, matmul: list[dict]) -> dict[str, Any]:
    """One table row: medians after warm-up, per-round ratios, tokens/s, MFU, peak RSS."""
    w = cell["warmup"]
    rec = {k: v[w:] for k, v in cell["records"].items()}
    model_cfg = json.loads((Path(cell["model_dir"]) / "config.json").read_text())
    n_params = cell["ready"]["bare"]["params"]
    new = cell["new_tokens"]
    peak = max(m["best_gflops"] for m in matmul) * 1e9
    step = {"ours": [r["wall_s"] for r in rec["ours"]], "bare": [r["step_s"] for r in rec["bare"]]}
    tokens = {
        "ours": [r["response_length/mean"] * ROWS_PER_STEP for r in rec["ours"]],
        "bare": [r["gen_tokens"] for r in rec["bare"]],
    }
    if "trl" in rec:
        step["trl"] = [r["step_s"] for r in rec["trl"]]
        tokens["trl"] = [r["gen_tokens"] for r in rec["trl"]]
    row: dict[str, Any] = {"size": size, "params": n_params, "new_tokens": new, "rounds": len(step["ours"])}
    for impl, times in step.items():
        med = _med(times)
        f = flops.step_flops(
            model_cfg, model_cfg["vocab_size"], ROWS_PER_STEP, 4, new, old_log_prob=impl != "trl"
        )  # TRL skips the old-log-prob forward here
        row[f"{impl}_s"] = med
        row[f"{impl}_min_s"] = min(times)
        row[f"{impl}_tok_s"] = _med(tokens[impl]) / med
        row[f"{impl}_mfu"] = f["total"] / med / peak
        row[f"{impl}_gflop"] = f["total"] / 1e9
    cpu = {"ours": [r["cpu_s"] for r in rec["ours"]], "bare": [r["cpu_s"] for r in rec["bare"]]}
    if "trl" in rec:
        cpu["trl"] = [r["cpu_s"] for r in rec["trl"]]
    for impl, xs in cpu.items():
        row[f"{impl}_cpu_s"] = _med(xs)
    row["cpu_ours_over_bare"] = _med([a / b for a, b in zip(cpu["ours"], cpu["bare"])])
    if "trl" in cpu:
        row["cpu_ours_over_trl"] = _med([a / c for a, c in zip(cpu["ours"], cpu["trl"])])
        row["cpu_trl_over_bare"] = _med([c / b for c, b in zip(cpu["trl"], cpu["bare"])])
    row["ours_over_bare"] = _med([a / b for a, b in zip(step["ours"], step["bare"])])
    if "trl" in step:
        row["ours_over_trl"] = _med([a / c for a, c in zip(step["ours"], step["trl"])])
        row["trl_over_bare"] = _med([c / b for c, b in zip(step["trl"], step["bare"])])
    rss = cell["ours_rss"]
    row["ours_rss"] = rss["driver_peak_mib"] + rss["worker_peak_mib"]
    row["ours_rss_driver"], row["ours_rss_worker"] = rss["driver_peak_mib"], rss["worker_peak_mib"]
    row["ray_daemons_mib"] = rss["ray_daemons_mib"]
    row["bare_rss"] = max(r["peak_rss_mib"] for r in cell["records"]["bare"])
    if "trl" in rec:
        row["trl_rss"] = max(r["peak_rss_mib"] for r in cell["records"]["trl"])
    stages = {s: _med([r.get(f"timing_s/{s}", 0.0) for r in rec["ours"]]) for s in OUR_STAGES}
    stages["outside stages"] = _med(
        [r["wall_s"] - sum(r.get(f"timing_s/{s}", 0.0) for s in OUR_STAGES) for r in rec["ours"]]
    )
    row["ours_stages"] = stages
    row["bare_stages"] = {
        k: _med([r[f"{k}_s"] for r in rec["bare"]]) for k in ("gen", "reward", "old_log_prob", "update")
    }
    row["threads"] = {
        "ours_worker": [w["threads"] for w in cell["ours_workers"]],
        **{k: v["threads"] for k, v in cell["ready"].items()},
    }
    return row


def _f(x: float | None, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def row_line(r: dict) -> str:
    """One markdown row of the main table."""
    g = r.get
    return (
        f"| {r['size']} | {r['params'] / 1e6:.3g}M | {r['new_tokens']} | {r['rounds']} "
        f"| {r['ours_s']:.3f} | {r['bare_s']:.3f} | {_f(g('trl_s'), '.3f')} "
        f"| {r['ours_over_bare']:.2f} | {_f(g('ours_over_trl'), '.2f')} | {_f(g('trl_over_bare'), '.2f')} "
        f"| {r['ours_tok_s']:.0f} / {r['bare_tok_s']:.0f} / {_f(g('trl_tok_s'), '.0f')} "
        f"| {100 * r['ours_mfu']:.1f} / {100 * r['bare_mfu']:.1f} / {_f(g('trl_mfu') and 100 * g('trl_mfu'), '.1f')} "
        f"| {r['ours_rss']:.0f} / {r['bare_rss']:.0f} / {_f(g('trl_rss'), '.0f')} |"
    )


HEADER = (
    "| size | params | new tokens | rounds | ours s/step | bare s/step | TRL s/step | ours/bare | ours/TRL "
    "| TRL/bare | gen tok/s ours / bare / TRL | MFU % ours / bare / TRL | peak RSS MiB ours / bare / TRL |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
)


def render(
    cells: list[dict], matmul: list[dict], args: Any, wall_s: float, peak_gflops: float | None = None
) -> str:
    """The full markdown report: matmul line, main table, per-stage table, notes.

    MFU uses ``peak_gflops`` when given (e.g. a quiet machine's matmul rate), else the best measured rate.
    """
    measured = max(m["best_gflops"] for m in matmul)
    ref = [{"best_gflops": peak_gflops}] if peak_gflops else matmul
    rows = [summarize(c, c["size"], ref) for c in cells]
    # stages that took time in any cell, in loop order (the same columns for every row)
    shown = (
        [
            k
            for k in rows[0]["ours_stages"]
            if k == "outside stages" or any(r["ours_stages"][k] > 0.0005 for r in rows)
        ]
        if rows
        else []
    )
    for r in rows:
        r["ours_stages"] = {k: r["ours_stages"][k] for k in shown}
    lines = [
        f"Machine: sustained fp32 matmul 2048x2048 ({matmul[0]['threads']} threads): "
        + ", ".join(f"{m['best_gflops']:.1f} (median {m['median_gflops']:.1f})" for m in matmul)
        + f" GFLOP/s before/after the cells (best {measured:.1f}); MFU below uses "
        + (
            f"--peak-gflops {peak_gflops:.1f} GFLOP/s."
            if peak_gflops
            else f"the best measured, {measured:.1f} GFLOP/s."
        ),
        "",
        HEADER,
        *[row_line(r) for r in rows],
        "",
        "Where our step's time goes (medians, seconds; `timing_s/<stage>` from the trainer's metrics) and the bare step's phases:",
        "",
        "| size | new tokens | ours: "
        + " / ".join(rows[0]["ours_stages"])
        + " | bare: gen / reward / old_log_prob / update |"
        if rows
        else "",
        "|---|---|---|---|" if rows else "",
    ]
    for r in rows:
        lines.append(
            f"| {r['size']} | {r['new_tokens']} | "
            + " / ".join(f"{v:.3f}" for v in r["ours_stages"].values())
            + " | "
            + " / ".join(f"{v:.3f}" for v in r["bare_stages"].values())
            + " |"
        )
    lines += [
        "",
        "Fastest round of each (the closest a busy machine gets to a quiet one), s/step and ratios:",
        "",
        "| size | new tokens | ours | bare | TRL | ours/bare | ours/TRL |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        trl = r.get("trl_min_s")
        lines.append(
            f"| {r['size']} | {r['new_tokens']} | {r['ours_min_s']:.3f} | {r['bare_min_s']:.3f} | "
            f"{_f(trl, '.3f')} | {r['ours_min_s'] / r['bare_min_s']:.2f} | "
            f"{_f(trl and r['ours_min_s'] / trl, '.2f')} |"
        )
    lines += [
        "",
        "CPU seconds per step (user + system, all threads; ours = driver + actor worker, Ray daemons "
        "excluded). Less sensitive to other jobs than wall time, but 2-thread spin-waits count too:",
        "",
        "| size | new tokens | CPU s ours | CPU s bare | CPU s TRL | ours/bare | ours/TRL | TRL/bare |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        g = r.get
        lines.append(
            f"| {r['size']} | {r['new_tokens']} | {r['ours_cpu_s']:.3f} | {r['bare_cpu_s']:.3f} | "
            f"{_f(g('trl_cpu_s'), '.3f')} | {r['cpu_ours_over_bare']:.2f} | "
            f"{_f(g('cpu_ours_over_trl'), '.2f')} | {_f(g('cpu_trl_over_bare'), '.2f')} |"
        )
    lines += [
        "",
        "Peak RSS of ours = driver peak + actor worker peak (VmHWM); Ray's own processes come on top:",
    ]
    for r in rows:
        lines.append(
            f"- {r['size']}/{r['new_tokens']}: driver {r['ours_rss_driver']:.0f} MiB + worker "
            f"{r['ours_rss_worker']:.0f} MiB; Ray daemons and idle workers {r['ray_daemons_mib']:.0f} MiB; "
            f"torch threads {r['threads']}"
        )
    lines.append(f"\nTotal benchmark wall time {wall_s / 60:.1f} min; command: `{' '.join(sys.argv)}`")
    return "\n".join(lines)
