"""The scaling curve: the GRPO step of ours, TRL's and the bare-PyTorch step from 138k to ~100M parameters,
in fp32 and in bf16 (bf16 compute over fp32 weights on every side).

    uv run python benchmarks/grpo_step/curve.py
    # a subset: --sizes xs s --lengths 16 64 --dtypes bf16; --dry-run prints the plan and an estimate only

TRL runs in this interpreter by default (the workspace's dev group pins ``trl``), so all three sides run
the same torch build; every table names the processor and each side's torch build.

For every precision (``--dtypes``) and size (``assets.SIZES``: xs 138k, s 4.2M, m 25M, l 103M) it runs
``run.py`` (one alternating run per size: ours, bare, TRL, ours, bare, TRL, ..., each (size, length) cell
in its own process, no ``ours_before`` column) over the lengths (16, 64, 256 new tokens), with
``--rounds`` measured rounds per size after ``--warmup``. Ours runs with ``actor.use_torch_compile``
= ``--ours-compile`` (default true, the compiled step of a long run): its compile time is the first
round's excess over the median step, a column of its own, never inside the per-step figures. Large cells train in micro-batches (``assets.micro_batch_rows``: the same rows
per forward/backward for all three, one optimizer step). Then it writes, into ``--out``:

- ``curve.md``: the processor and torch builds; per precision and cell, seconds per step, generated
  tokens per second of the whole step, MFU (counted matmul FLOPs / step time / best 2048x2048 matmul
  rate in that precision measured in the run), union peak memory of each implementation's processes,
  the ratios ours/bare, ours/TRL (medians of per-round ratios) and ours' compile time; then fp32 and
  bf16 side by side, and where our step's time goes (the trainer's ``timing_s/<stage>``);
- ``curve.png``: seconds per step against parameters (log-log), one panel per precision.

``--render`` redraws both from ``--out``'s saved cells without running anything.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import assets  # noqa: E402
import flops  # noqa: E402
import report  # noqa: E402
from stepper import add_omp_wait_policy_arg, apply_omp_wait_policy  # noqa: E402

IMPLS = ("ours", "bare", "trl")
LABEL = {"ours": "ours (verl)", "bare": "bare PyTorch", "trl": "TRL GRPOTrainer"}
DEFAULT_ROUNDS = {"xs": 6, "s": 5, "m": 3, "l": 2}
# Planning guesses for --dry-run only: MFU of a step (all three about alike) and fixed seconds per
# cell (three processes starting, Ray, TRL's imports, the model build).
_GUESS_MFU, _GUESS_GFLOPS, _CELL_START_S = 0.45, 130.0, 60.0


def _parse_rounds(items: list[str]) -> dict[str, int]:
    out = dict(DEFAULT_ROUNDS)
    for item in items:
        size, _, n = item.partition("=")
        if size not in assets.SIZES or not n.isdigit():
            raise SystemExit(f"--rounds {item!r}: expected SIZE=N with SIZE in {sorted(assets.SIZES)}")
        out[size] = int(n)
    return out


# bf16 matmuls: about twice the fp32 rate where the processor has bf16 units (planning guess only)
_GUESS_BF16_SPEEDUP = 1.6


def _estimate_s(size: str, length: int, rounds: int, warmup: int, with_trl: bool, dtype: str = "fp32") -> float:
    cfg = assets.SIZES[size]
    f = flops.step_flops(cfg, 101, assets.ROWS_PER_STEP, assets.PROMPT_TOKENS, length)["total"]
    per_step = f / (_GUESS_MFU * _GUESS_GFLOPS * 1e9) / (_GUESS_BF16_SPEEDUP if dtype == "bf16" else 1.0)
    return _CELL_START_S + per_step * (2 + with_trl) * (rounds + warmup)


def _run_size(args: argparse.Namespace, size: str, rounds: int, dtype: str) -> None:
    cmd = [
        sys.executable, str(HERE / "run.py"), "--sizes", size, "--lengths", *map(str, args.lengths),
        "--steps", str(rounds), "--warmup", str(args.warmup), "--before", "none",
        "--out", str(Path(args.out) / dtype / size), "--assets", args.assets,
        "--worker-threads", str(args.worker_threads), "--threads", str(args.threads),
        "--dtype", dtype, "--ours-compile", args.ours_compile,
        "--trl-python", args.trl_python or "none",
    ]  # fmt: skip
    if args.micro_batch:
        cmd += ["--micro-batch", str(args.micro_batch)]
    if args.after_overrides:
        cmd += ["--after-overrides", *args.after_overrides]
    print("$ " + " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)


def load_rows(out: Path, sizes: list[str], lengths: list[int], peak_gflops: float | None) -> list[dict]:
    """One ``report.summarize`` row per saved cell, MFU against the best matmul rate of all runs."""
    cells, matmul = [], []
    for size in sizes:
        d = out / size
        if (d / "matmul.json").exists():
            matmul += json.loads((d / "matmul.json").read_text())
        for length in lengths:
            path = d / f"{size}_L{length}.json"
            if path.exists():
                cells.append((size, json.loads(path.read_text())))
    if not cells:
        raise SystemExit(f"no saved cells under {out} for sizes {sizes} and lengths {lengths}")
    ref = [{"best_gflops": peak_gflops}] if peak_gflops else matmul
    return [report.summarize(cell, size, ref) for size, cell in cells]


def _f(x: float | None, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def _trio(r: dict, key: str, fmt: str, scale: float = 1.0) -> str:
    """``ours / bare / TRL`` of ``<impl><key>``, ``-`` where not measured."""
    return " / ".join(_f(None if r.get(f"{i}{key}") is None else scale * r[f"{i}{key}"], fmt) for i in IMPLS)


def table(rows: list[dict]) -> str:
    """One precision's table (with ours' compile time: the first round's excess over its median step)."""
    lines = [
        "| size | params | new tokens | micro-batch | rounds | s/step ours / bare / TRL | ours/bare | ours/TRL "
        "| ours compile s | gen tok/s ours / bare / TRL | MFU % ours / bare / TRL | union peak MiB ours / bare / TRL "
        "| memory ours/bare |",
        "|---" * 13 + "|",
    ]
    for r in rows:
        g = r.get
        lines.append(
            f"| {r['size']} | {r['params'] / 1e6:.3g}M | {r['new_tokens']} | {r['micro_batch']} | {r['rounds']} "
            f"| {_trio(r, '_s', '.3f')} | {r['ours_over_bare']:.2f} | {_f(g('ours_over_trl'), '.2f')} "
            f"| {_f(g('ours_warmup_s'), '.1f')} "
            f"| {_trio(r, '_tok_s', '.0f')} | {_trio(r, '_mfu', '.1f', 100.0)} | {_trio(r, '_union', '.0f')} "
            f"| {_f(g('union_ours_over_bare'), '.2f')} |"
        )
    return "\n".join(lines)


def side_by_side(by_dtype: dict[str, list[dict]]) -> str:
    """fp32 and bf16 per cell: the ratios against the targets, ours' compile time, bf16's speed-up."""
    if set(by_dtype) != {"fp32", "bf16"}:
        return ""
    bf16 = {(r["size"], r["new_tokens"]): r for r in by_dtype["bf16"]}
    lines = [
        "| size | new tokens | ours/TRL fp32 / bf16 | ours/bare fp32 / bf16 | ours compile s fp32 / bf16 "
        "| fp32 s / bf16 s: ours / bare / TRL |",
        "|---|---|---|---|---|---|",
    ]
    for a in by_dtype["fp32"]:
        b = bf16.get((a["size"], a["new_tokens"]))
        if b is None:
            continue
        speedup = " / ".join(
            _f(a[f"{i}_s"] / b[f"{i}_s"] if a.get(f"{i}_s") and b.get(f"{i}_s") else None, ".2f") for i in IMPLS
        )
        lines.append(
            f"| {a['size']} | {a['new_tokens']} | {_f(a.get('ours_over_trl'), '.2f')} / {_f(b.get('ours_over_trl'), '.2f')} "
            f"| {a['ours_over_bare']:.2f} / {b['ours_over_bare']:.2f} "
            f"| {_f(a.get('ours_warmup_s'), '.1f')} / {_f(b.get('ours_warmup_s'), '.1f')} | {speedup} |"
        )
    return "\n".join(lines)


def render(by_dtype: dict[str, list[dict]]) -> str:
    rows = [r for rs in by_dtype.values() for r in rs]
    parts = report.setup_lines(rows[:1])[:2]
    for dtype, rs in by_dtype.items():
        parts += [
            "",
            f"### {dtype}" + (" (bf16 compute over fp32 weights on every side)" if dtype == "bf16" else ""),
            "",
            report.setup_lines(rs[:1])[2],
            "",
            table(rs),
            *report.stage_tables(rs),
        ]
    both = side_by_side(by_dtype)
    if both:
        parts += ["", "### fp32 and bf16 side by side", "", both]
    return "\n".join(parts)


def plot(by_dtype: dict[str, list[dict]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(by_dtype), figsize=(7 * len(by_dtype), 5), squeeze=False)
    colors = {"ours": "tab:blue", "bare": "tab:gray", "trl": "tab:orange"}
    for ax, (dtype, rows) in zip(axes[0], by_dtype.items()):
        styles = dict(zip(sorted({r["new_tokens"] for r in rows}), ["-", "--", ":", "-."]))
        for impl in IMPLS:
            for length, style in styles.items():
                pts = sorted(
                    (r["params"], r[f"{impl}_s"]) for r in rows if r["new_tokens"] == length and f"{impl}_s" in r
                )
                if pts:
                    xs, ys = zip(*pts)
                    ax.plot(
                        xs, ys, style, marker="o", color=colors[impl], label=f"{LABEL[impl]}, {length} new tokens"
                    )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("parameters")
        ax.set_ylabel("seconds per GRPO step (64 completions)")
        ax.set_title(f"GRPO step time vs model size (CPU, {dtype}, medians)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", nargs="+", default=list(assets.SIZES), choices=sorted(assets.SIZES))
    ap.add_argument("--lengths", nargs="+", type=int, default=[16, 64, 256])
    ap.add_argument("--dtypes", nargs="+", default=["fp32", "bf16"], choices=["fp32", "bf16"])
    ap.add_argument(
        "--rounds",
        nargs="*",
        default=[],
        help=f"measured rounds per size, e.g. l=3 (defaults {DEFAULT_ROUNDS})",
    )
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--micro-batch", type=int, default=0, help="rows per forward/backward (0 = assets rule)")
    ap.add_argument(
        "--trl-python",
        default=sys.executable,
        help="a Python with TRL installed (default: this one, i.e. the same torch as ours; 'none': no TRL)",
    )
    ap.add_argument("--ours-compile", default="true", choices=["true", "false", "null"],
                    help="ours' actor.use_torch_compile (run.py's flag)")
    ap.add_argument("--after-overrides", nargs="*", default=[], help="key=value for our step (run.py's flag)")
    ap.add_argument("--worker-threads", type=int, default=2)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--assets", default="/tmp/grpo_step_assets")
    ap.add_argument("--out", default="/tmp/grpo_curve")
    ap.add_argument(
        "--peak-gflops", type=float, default=None, help="matmul rate for MFU (default: best measured)"
    )
    ap.add_argument(
        "--dry-run", action="store_true", help="print the plan and a runtime estimate, run nothing"
    )
    ap.add_argument("--render", action="store_true", help="only rewrite curve.md / curve.png from --out")
    add_omp_wait_policy_arg(ap)
    args = ap.parse_args()
    if args.trl_python.lower() == "none":
        args.trl_python = None
    apply_omp_wait_policy(args.omp_wait_policy)  # every process started below inherits it
    rounds = _parse_rounds(args.rounds)
    out = Path(args.out)
    if not args.render:
        total = 0.0
        for dtype in args.dtypes:
            for size in args.sizes:
                for length in args.lengths:
                    est = _estimate_s(size, length, rounds[size], args.warmup, bool(args.trl_python), dtype)
                    total += est
                    micro = args.micro_batch or assets.micro_batch_rows(size, length)
                    print(
                        f"plan {dtype} {size}/{length}: {args.warmup}+{rounds[size]} rounds, micro-batch {micro}, "
                        f"~{est / 60:.1f} min"
                    )
        print(f"estimated total ~{total / 60:.0f} min on a quiet 2-core machine", flush=True)
        if args.dry_run:
            return
        for dtype in args.dtypes:
            for size in args.sizes:
                _run_size(args, size, rounds[size], dtype)
    by_dtype = {
        dtype: load_rows(out / dtype, args.sizes, args.lengths, args.peak_gflops)
        for dtype in args.dtypes
        if (out / dtype).is_dir()
    }
    text = render(by_dtype) + f"\n\nCommand: `{' '.join(sys.argv)}`\n"
    (out / "curve.md").write_text(text)
    plot(by_dtype, out / "curve.png")
    print(text)
    print(f"wrote {out / 'curve.md'} and {out / 'curve.png'}")


if __name__ == "__main__":
    main()
