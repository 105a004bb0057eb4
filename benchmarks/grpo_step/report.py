"""Medians, ratios, MFU, memory and the markdown tables of the GRPO-step benchmark (``cell.py`` records).

Implementations: ``ours`` (the current trainer), ``ours_before`` (the trainer at an older commit,
when the cell measured it), ``bare``, ``trl`` (when measured). Cells saved before ``ours_before``
and the union memory existed render with ``-`` in those columns.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any

import flops

ROWS_PER_STEP = 64
IMPLS = ("ours", "ours_before", "bare", "trl")
SHORT = {"ours": "ours", "ours_before": "before", "bare": "bare", "trl": "TRL"}
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
BEFORE_AFTER_STAGES = ("gen", "old_log_prob", "update_actor")


def _med(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def _ratio(a: list[float], b: list[float]) -> float:
    """Median of the per-round ratios a/b (the steps of one round see the same machine load)."""
    return _med([x / y for x, y in zip(a, b)])


def _does_old_log_prob(cell: dict, impl: str) -> bool:
    """Whether the step runs the no-grad old-log-prob forward (for the FLOP count)."""
    if impl == "trl":
        return False  # TRL skips it at one iteration per generation
    if impl == "ours":
        flags = {o.replace(" ", "").lower() for o in cell.get("after_overrides") or []}
        return "actor_rollout_ref.actor.use_rollout_log_probs=true" not in flags
    return True


def _stages(records: list[dict]) -> dict[str, float]:
    stages = {s: _med([r.get(f"timing_s/{s}", 0.0) for r in records]) for s in OUR_STAGES}
    stages["outside stages"] = _med(
        [r["wall_s"] - sum(r.get(f"timing_s/{s}", 0.0) for s in OUR_STAGES) for r in records]
    )
    return stages


def summarize(cell: dict, size: str, matmul: list[dict]) -> dict[str, Any]:
    """One table row: medians after warm-up, per-round ratios, tokens/s, MFU, memory."""
    w = cell["warmup"]
    rec = {k: v[w:] for k, v in cell["records"].items()}
    model_cfg = json.loads((Path(cell["model_dir"]) / "config.json").read_text())
    n_params = cell["ready"]["bare"]["params"]
    new = cell["new_tokens"]
    peak = max(m["best_gflops"] for m in matmul) * 1e9
    impls = [i for i in IMPLS if i in rec]
    step = {i: [r["wall_s" if i == "ours" else "step_s"] for r in rec[i]] for i in impls}
    tokens = {
        i: [
            r["response_length/mean"] * ROWS_PER_STEP if i.startswith("ours") else r["gen_tokens"]
            for r in rec[i]
        ]
        for i in impls
    }
    row: dict[str, Any] = {"size": size, "params": n_params, "new_tokens": new, "rounds": len(step["ours"])}
    row["micro_batch"] = cell.get("micro_batch", ROWS_PER_STEP)
    row["dtype"] = cell.get("dtype", "fp32")
    row["ours_compile"] = cell.get("ours_compile")
    row["processor"] = cell.get("processor")
    row["torch_builds"] = cell.get("torch_builds")
    row["ours_workers"] = cell.get("ours_workers") or []
    row["matmul_dtypes"] = {
        i: cell["records"][i][-1].get("matmul_dtypes") for i in ("bare", "trl") if i in cell["records"]
    }
    for impl in impls:
        med = _med(step[impl])
        f = flops.step_flops(
            model_cfg,
            model_cfg["vocab_size"],
            ROWS_PER_STEP,
            4,
            new,
            old_log_prob=_does_old_log_prob(cell, impl),
        )
        row[f"{impl}_s"] = med
        row[f"{impl}_min_s"] = min(step[impl])
        row[f"{impl}_tok_s"] = _med(tokens[impl]) / med
        row[f"{impl}_mfu"] = f["total"] / med / peak
        row[f"{impl}_gflop"] = f["total"] / 1e9
        row[f"{impl}_cpu_s"] = _med([r["cpu_s"] for r in rec[impl]])
        # the first round (compile, caches, allocator warm-up), kept out of the medians above
        first = cell["records"][impl][0]
        row[f"{impl}_first_s"] = first["wall_s" if impl == "ours" else "step_s"]
        row[f"{impl}_warmup_s"] = row[f"{impl}_first_s"] - med
    cpu = {i: [r["cpu_s"] for r in rec[i]] for i in impls}
    for a, b in [("ours", "ours_before"), ("ours", "bare"), ("ours", "trl"), ("ours_before", "bare"),
                 ("ours_before", "trl"), ("trl", "bare")]:  # fmt: skip
        if a in rec and b in rec:
            row[f"{a}_over_{b}"] = _ratio(step[a], step[b])
            row[f"cpu_{a}_over_{b}"] = _ratio(cpu[a], cpu[b])

    # memory: summed per-process peaks (lifetime) and the union peak over the measured rounds
    rss = cell["ours_rss"]
    row["ours_rss"] = rss["driver_peak_mib"] + rss["worker_peak_mib"]
    row["ours_rss_driver"], row["ours_rss_worker"] = rss["driver_peak_mib"], rss["worker_peak_mib"]
    row["ray_daemons_mib"] = rss["ray_daemons_mib"]
    before_rss = cell.get("ours_before_rss")
    if before_rss:
        row["ours_before_rss"] = before_rss["driver_peak_mib"] + before_rss["worker_peak_mib"]
        row["ours_before_rss_driver"] = before_rss["driver_peak_mib"]
        row["ours_before_rss_worker"] = before_rss["worker_peak_mib"]
        row["ours_before_ray_daemons_mib"] = before_rss["ray_daemons_mib"]
    for impl in ("bare", "trl"):
        if impl in rec:
            row[f"{impl}_rss"] = max(r["peak_rss_mib"] for r in cell["records"][impl])
    union = cell.get("union_rss") or {}
    for impl in impls:
        u = union.get(impl)
        if u and u["samples"] > 0:
            row[f"{impl}_union"] = u["union_peak_mib"]
            row[f"{impl}_rss_at_union_peak"] = u["sum_rss_at_union_peak_mib"]
    if "ours_union" in row and "bare_union" in row:
        row["union_ours_over_bare"] = row["ours_union"] / row["bare_union"]

    row["ours_stages"] = _stages(rec["ours"])
    if "ours_before" in rec:
        row["ours_before_stages"] = _stages(rec["ours_before"])
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


def _slash(r: dict, key: str, fmt: str, scale: float = 1.0) -> str:
    """``ours / before / bare / TRL`` of ``<impl><key>``, ``-`` where not measured."""
    return " / ".join(_f(None if r.get(f"{i}{key}") is None else scale * r[f"{i}{key}"], fmt) for i in IMPLS)


HEADER = (
    "| size | params | new tokens | rounds | ours s/step | ours_before s/step | bare s/step | TRL s/step "
    "| ours/ours_before | ours/bare | ours/TRL | ours_before/bare | ours_before/TRL | TRL/bare "
    "| gen tok/s ours / before / bare / TRL | MFU % ours / before / bare / TRL "
    "| peak RSS summed MiB ours / before / bare / TRL | union peak MiB ours / before / bare / TRL "
    "| union ours/bare |\n" + "|---" * 19 + "|"
)


def row_line(r: dict) -> str:
    """One markdown row of the main table."""
    g = r.get
    return (
        f"| {r['size']} | {r['params'] / 1e6:.3g}M | {r['new_tokens']} | {r['rounds']} "
        f"| {r['ours_s']:.3f} | {_f(g('ours_before_s'), '.3f')} | {r['bare_s']:.3f} | {_f(g('trl_s'), '.3f')} "
        f"| {_f(g('ours_over_ours_before'), '.2f')} | {r['ours_over_bare']:.2f} | {_f(g('ours_over_trl'), '.2f')} "
        f"| {_f(g('ours_before_over_bare'), '.2f')} | {_f(g('ours_before_over_trl'), '.2f')} "
        f"| {_f(g('trl_over_bare'), '.2f')} "
        f"| {_slash(r, '_tok_s', '.0f')} | {_slash(r, '_mfu', '.1f', 100.0)} "
        f"| {_slash(r, '_rss', '.0f')} | {_slash(r, '_union', '.0f')} | {_f(g('union_ours_over_bare'), '.2f')} |"
    )


def setup_lines(rows: list[dict]) -> list[str]:
    """Processor, torch build of every side, precision and ours' compile setting (from the first row that
    has them; cells saved before these were recorded give none)."""
    import machine

    r = next((r for r in rows if r.get("processor")), None)
    if r is None:
        return ["(processor and torch builds not recorded in these cells)"]
    ours = r["ours_workers"][0] if r["ours_workers"] else {}
    dtypes = "; ".join(
        f"{SHORT[i]} gen {'/'.join(d['gen'])}, update {'/'.join(d['update'])}"
        for i, d in r["matmul_dtypes"].items()
        if d
    )
    return [
        f"Processor: {r['processor']['describe']}; native bf16 matmul: {'yes' if r['processor']['native_bf16'] else 'no'}.",
        f"Torch: {machine.same_torch(r['torch_builds'])}.",
        f"Precision: {r['dtype']} (ours computes in {ours.get('compute_dtype') or '?'} over fp32 masters; "
        f"q-projection output dtypes seen: {dtypes or '-'}). Ours' actor.use_torch_compile={r['ours_compile']} "
        f"({ours.get('compile') or '?'}).",
    ]


def stage_tables(rows: list[dict]) -> list[str]:
    """Where our step's time goes per cell (and before -> after when the rows carry ``ours_before``)."""
    # stages that took time in any cell, in loop order (the same columns for every row)
    shown = [
        k
        for k in rows[0]["ours_stages"]
        if k == "outside stages" or any(r["ours_stages"][k] > 0.0005 for r in rows)
    ]
    lines = [
        "",
        "Where our step's time goes (medians, seconds; `timing_s/<stage>` from the trainer's metrics) and the bare step's phases:",
        "",
        "| size | new tokens | ours: "
        + " / ".join(shown)
        + " | bare: gen / reward / old_log_prob / update |",
        "|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['size']} | {r['new_tokens']} | "
            + " / ".join(f"{r['ours_stages'][k]:.3f}" for k in shown)
            + " | "
            + " / ".join(f"{v:.3f}" for v in r["bare_stages"].values())
            + " |"
        )
    if any("ours_before_stages" in r for r in rows):
        lines += [
            "",
            "Before -> after per stage (medians, seconds, `timing_s/<stage>`; a stage the new config skips shows 0):",
            "",
            "| size | new tokens | "
            + " | ".join(f"{s} before / after" for s in BEFORE_AFTER_STAGES)
            + " | step before / after |",
            "|---|---|" + "---|" * (len(BEFORE_AFTER_STAGES) + 1),
        ]
        for r in rows:
            if "ours_before_stages" not in r:
                continue
            b, a = r["ours_before_stages"], r["ours_stages"]
            lines.append(
                f"| {r['size']} | {r['new_tokens']} | "
                + " | ".join(f"{b[s]:.3f} / {a[s]:.3f}" for s in BEFORE_AFTER_STAGES)
                + f" | {r['ours_before_s']:.3f} / {r['ours_s']:.3f} |"
            )
    return lines


def render(
    cells: list[dict], matmul: list[dict], args: Any, wall_s: float, peak_gflops: float | None = None
) -> str:
    """The full markdown report: matmul line, main table, stage tables, fastest rounds, CPU, memory.

    MFU uses ``peak_gflops`` when given (e.g. a quiet machine's matmul rate), else the best measured rate.
    """
    measured = max(m["best_gflops"] for m in matmul)
    ref = [{"best_gflops": peak_gflops}] if peak_gflops else matmul
    rows = [summarize(c, c["size"], ref) for c in cells]
    before = sorted({c["before"]["commit"][:10] for c in cells if c.get("before")})
    after = sorted({" ".join(c.get("after_overrides") or []) for c in cells})
    lines = [
        *setup_lines(rows),
        "",
        f"Machine: sustained {matmul[0].get('dtype', 'fp32')} matmul 2048x2048 ({matmul[0]['threads']} threads): "
        + ", ".join(f"{m['best_gflops']:.1f} (median {m['median_gflops']:.1f})" for m in matmul)
        + f" GFLOP/s before/after the cells (best {measured:.1f}); MFU below uses "
        + (
            f"--peak-gflops {peak_gflops:.1f} GFLOP/s."
            if peak_gflops
            else f"the best measured, {measured:.1f} GFLOP/s."
        ),
        "",
        f"ours_before: the trainer at commit {', '.join(before) or '- (not measured)'}; "
        f"ours: the working tree with overrides `{' | '.join(a or '(none)' for a in after)}`.",
        "",
        HEADER,
        *[row_line(r) for r in rows],
    ]
    if rows:
        lines += stage_tables(rows)
    lines += [
        "",
        "Fastest round of each (the closest a busy machine gets to a quiet one), s/step and ratios:",
        "",
        "| size | new tokens | ours | ours_before | bare | TRL | ours/ours_before | ours/bare | ours/TRL |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        g = r.get
        trl, bef = g("trl_min_s"), g("ours_before_min_s")
        lines.append(
            f"| {r['size']} | {r['new_tokens']} | {r['ours_min_s']:.3f} | {_f(bef, '.3f')} | "
            f"{r['bare_min_s']:.3f} | {_f(trl, '.3f')} | {_f(bef and r['ours_min_s'] / bef, '.2f')} | "
            f"{r['ours_min_s'] / r['bare_min_s']:.2f} | {_f(trl and r['ours_min_s'] / trl, '.2f')} |"
        )
    lines += [
        "",
        "First round (compile, caches and allocator warm-up; "
        + ("left out of every median above" if all(c["warmup"] > 0 for c in cells) else
           "INSIDE the medians above: --warmup 0")
        + ") and its excess over the median step, s:",
        "",
        "| size | new tokens | first ours / before / bare / TRL | excess ours / before / bare / TRL |",
        "|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['size']} | {r['new_tokens']} | {_slash(r, '_first_s', '.2f')} | {_slash(r, '_warmup_s', '.2f')} |"
        )
    lines += [
        "",
        "CPU seconds per step (user + system, all threads; ours and ours_before = driver + actor worker, "
        "Ray daemons excluded). Less sensitive to other jobs than wall time, but 2-thread spin-waits count too:",
        "",
        "| size | new tokens | CPU s ours | CPU s ours_before | CPU s bare | CPU s TRL "
        "| ours/ours_before | ours/bare | ours/TRL | TRL/bare |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        g = r.get
        lines.append(
            f"| {r['size']} | {r['new_tokens']} | {r['ours_cpu_s']:.3f} | {_f(g('ours_before_cpu_s'), '.3f')} | "
            f"{r['bare_cpu_s']:.3f} | {_f(g('trl_cpu_s'), '.3f')} | {_f(g('cpu_ours_over_ours_before'), '.2f')} | "
            f"{r['cpu_ours_over_bare']:.2f} | {_f(g('cpu_ours_over_trl'), '.2f')} | {_f(g('cpu_trl_over_bare'), '.2f')} |"
        )
    lines += [
        "",
        "Memory. *Peak RSS summed*: each process's lifetime peak (VmHWM / ru_maxrss), added up; ours and "
        "ours_before = driver + actor worker, so the torch/CUDA library pages both map count twice. "
        "*Union peak*: the peak over the measured rounds of the set's union resident memory (anonymous "
        "pages summed, file pages once per file; `memory.py`), sampled every ~50 ms. Each Ray cluster's "
        "own processes come on top:",
    ]
    for r in rows:
        g = r.get
        text = (
            f"- {r['size']}/{r['new_tokens']}: ours driver {r['ours_rss_driver']:.0f} MiB + worker "
            f"{r['ours_rss_worker']:.0f} MiB, Ray daemons and idle workers {r['ray_daemons_mib']:.0f} MiB"
        )
        if g("ours_before_rss") is not None:
            text += (
                f"; ours_before driver {r['ours_before_rss_driver']:.0f} MiB + worker "
                f"{r['ours_before_rss_worker']:.0f} MiB, Ray daemons {r['ours_before_ray_daemons_mib']:.0f} MiB"
            )
        checks = [
            f"{SHORT[i]} {r[f'{i}_union']:.0f} vs {r[f'{i}_rss_at_union_peak']:.0f}"
            for i in ("bare", "trl")
            if g(f"{i}_union") is not None
        ]
        if checks:  # one process: the union must equal its RSS
            text += "; one-process check, union vs RSS at that sample: " + ", ".join(checks)
        lines.append(text + f"; torch threads {r['threads']}")
    lines.append(f"\nTotal benchmark wall time {wall_s / 60:.1f} min; command: `{' '.join(sys.argv)}`")
    return "\n".join(lines)
