"""The scaling curve: the GRPO step of ours, TRL's and the bare-PyTorch step from 138k to ~100M parameters.

    uv run python benchmarks/grpo_step/curve.py --trl-python /tmp/venv-trl/bin/python
    # a subset: --sizes xs s --lengths 16 64; --dry-run prints the plan and a runtime estimate only

For every size (``assets.SIZES``: xs 138k, s 4.2M, m 25M, l 103M) it runs ``run.py`` (one alternating
run per size: ours, bare, TRL, ours, bare, TRL, ..., each (size, length) cell in its own process, no
``ours_before`` column) over the lengths (16, 64, 256 new tokens), with ``--rounds`` measured rounds per
size after ``--warmup``. Large cells train in micro-batches (``assets.micro_batch_rows``: the same rows
per forward/backward for all three, one optimizer step). Then it writes, into ``--out``:

- ``curve.md``: per cell, seconds per step, generated tokens per second of the whole step, MFU (counted
  matmul FLOPs / step time / best 2048x2048 fp32 matmul rate measured in the run), union peak memory
  of each implementation's processes, and the ratios ours/bare, ours/TRL (medians of per-round ratios);
  then where our step's time goes (the trainer's ``timing_s/<stage>``);
- ``curve.png``: seconds per step against parameters (log-log), one line per implementation and length.

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


def _estimate_s(size: str, length: int, rounds: int, warmup: int, with_trl: bool) -> float:
    cfg = assets.SIZES[size]
    f = flops.step_flops(cfg, 101, assets.ROWS_PER_STEP, assets.PROMPT_TOKENS, length)["total"]
    per_step = f / (_GUESS_MFU * _GUESS_GFLOPS * 1e9)
    return _CELL_START_S + per_step * (2 + with_trl) * (rounds + warmup)


def _run_size(args: argparse.Namespace, size: str, rounds: int) -> None:
    cmd = [
        sys.executable, str(HERE / "run.py"), "--sizes", size, "--lengths", *map(str, args.lengths),
        "--steps", str(rounds), "--warmup", str(args.warmup), "--before", "none",
        "--out", str(Path(args.out) / size), "--assets", args.assets,
        "--worker-threads", str(args.worker_threads), "--threads", str(args.threads),
    ]  # fmt: skip
    if args.trl_python:
        cmd += ["--trl-python", args.trl_python]
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
    lines = [
        "| size | params | new tokens | micro-batch | rounds | s/step ours / bare / TRL | ours/bare | ours/TRL "
        "| gen tok/s ours / bare / TRL | MFU % ours / bare / TRL | union peak MiB ours / bare / TRL "
        "| memory ours/bare |",
        "|---" * 12 + "|",
    ]
    for r in rows:
        g = r.get

        lines.append(
            f"| {r['size']} | {r['params'] / 1e6:.3g}M | {r['new_tokens']} | {r['micro_batch']} | {r['rounds']} "
            f"| {_trio(r, '_s', '.3f')} | {r['ours_over_bare']:.2f} | {_f(g('ours_over_trl'), '.2f')} "
            f"| {_trio(r, '_tok_s', '.0f')} | {_trio(r, '_mfu', '.1f', 100.0)} | {_trio(r, '_union', '.0f')} "
            f"| {_f(g('union_ours_over_bare'), '.2f')} |"
        )
    lines += report.stage_tables(rows)
    return "\n".join(lines)


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 5))
    colors = {"ours": "tab:blue", "bare": "tab:gray", "trl": "tab:orange"}
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
    ax.set_title("GRPO step time vs model size (CPU, fp32, medians)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", nargs="+", default=list(assets.SIZES), choices=sorted(assets.SIZES))
    ap.add_argument("--lengths", nargs="+", type=int, default=[16, 64, 256])
    ap.add_argument(
        "--rounds",
        nargs="*",
        default=[],
        help=f"measured rounds per size, e.g. l=3 (defaults {DEFAULT_ROUNDS})",
    )
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--micro-batch", type=int, default=0, help="rows per forward/backward (0 = assets rule)")
    ap.add_argument("--trl-python", default=None, help="a Python with TRL installed (omit: no TRL column)")
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
    apply_omp_wait_policy(args.omp_wait_policy)  # every process started below inherits it
    rounds = _parse_rounds(args.rounds)
    out = Path(args.out)
    if not args.render:
        total = 0.0
        for size in args.sizes:
            for length in args.lengths:
                est = _estimate_s(size, length, rounds[size], args.warmup, bool(args.trl_python))
                total += est
                micro = args.micro_batch or assets.micro_batch_rows(size, length)
                print(
                    f"plan {size}/{length}: {args.warmup}+{rounds[size]} rounds, micro-batch {micro}, ~{est / 60:.1f} min"
                )
        print(f"estimated total ~{total / 60:.0f} min on a quiet 2-core machine", flush=True)
        if args.dry_run:
            return
        for size in args.sizes:
            _run_size(args, size, rounds[size])
    rows = load_rows(out, args.sizes, args.lengths, args.peak_gflops)
    text = table(rows) + f"\n\nCommand: `{' '.join(sys.argv)}`\n"
    (out / "curve.md").write_text(text)
    plot(rows, out / "curve.png")
    print(text)
    print(f"wrote {out / 'curve.md'} and {out / 'curve.png'}")


if __name__ == "__main__":
    main()
