"""GRPO step benchmark: our trainer vs the bare-PyTorch step vs TRL's GRPOTrainer, alternating.

    uv run python benchmarks/grpo_step/run.py --sizes xs s --lengths 16 64 --steps 10 [--dtype bf16]

Settings (the TRL anchor's, ``/work/shared/anchors/trl_anchor/``): random-init Qwen2 ``xs`` (138k
parameters) and ``s`` (4.2M), prompts ``a+b=`` (a, b in 0..9, 4 tokens), 8 prompts x 8 samples = 64
completions per step of exactly 16 or 64 new tokens, temperature 1, one AdamW step per generation
(constant LR 1e-3, grad clip 1.0), fp32, no KL, no gradient checkpointing.

Each (size, length) cell runs in its own process (``cell.py``) so that peak memory is per cell:
our step (``RayPPOTrainer.fit`` over one ``ActorRolloutRefWorker`` on CPU, the working tree with
``ours.AFTER`` and ``--after-overrides``), then our step as of ``--before`` (default 06aa171, the trainer before
issue 9's performance work, from a git worktree: ``before.py``), then one bare step (``bare.py``),
then one TRL step (``trl_driver.py``; by default in this interpreter, i.e. on the same torch build as
ours: the workspace's dev group pins ``trl``), repeated. ``--dtype bf16`` runs every side in bf16 over
fp32 weights; ``--ours-compile`` sets ours' ``actor.use_torch_compile`` (default true: the compiled
step a long run gets; its compile time is the first round's excess, reported in a column of its own). The first ``--warmup`` rounds are left out; the table shows medians, and
the ratios are medians of the per-round ratios (robust to a busy machine). A 2048 x 2048 fp32 matmul
before and after the cells gives the machine's sustained GFLOP/s, the reference for each step's
model-FLOPs utilisation (MFU = counted matmul FLOPs of the step / step time / best matmul rate).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import assets  # noqa: E402
import before  # noqa: E402
import report  # noqa: E402
from stepper import add_omp_wait_policy_arg, apply_omp_wait_policy  # noqa: E402


def _matmul(threads: int, dtype: str = "fp32") -> dict:
    """The matmul reference in the run's dtype, measured in a fresh process (nothing else loaded)."""
    cmd = [sys.executable, str(HERE / "flops.py"), "--json", "--threads", str(threads), "--dtype", dtype]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def _parse_cell_steps(items: list[str]) -> dict[tuple[str, int], int]:
    """``["s/64=6"]`` -> ``{("s", 64): 6}``."""
    out = {}
    for item in items:
        try:
            cell, n = item.split("=")
            size, length = cell.split("/")
            out[(size, int(length))] = int(n)
        except ValueError as e:
            raise SystemExit(f"--cell-steps {item!r}: expected SIZE/LENGTH=STEPS, e.g. s/64=6") from e
    return out


def _render_saved(args: argparse.Namespace) -> None:
    """Print the tables again from ``--out``'s cell JSON files and matmul.json (e.g. with --peak-gflops)."""
    out = Path(args.out)
    cells = []
    for size in args.sizes:
        for length in args.lengths:
            path = out / f"{size}_L{length}.json"
            if path.exists():
                cell = json.loads(path.read_text())
                cell["size"] = size
                cells.append(cell)
    matmul = json.loads((out / "matmul.json").read_text())
    print(report.render(cells, matmul, args, float("nan"), args.peak_gflops))


def _default_trl_python() -> str | None:
    """This interpreter when it has TRL (the workspace's dev group), so TRL runs on ours' torch build."""
    import importlib.util

    return sys.executable if importlib.util.find_spec("trl") is not None else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", nargs="+", default=["xs", "s"], choices=sorted(assets.SIZES))
    ap.add_argument("--lengths", nargs="+", type=int, default=[16, 64])
    ap.add_argument("--steps", type=int, default=10, help="measured rounds per cell (after warm-up)")
    ap.add_argument("--warmup", type=int, default=2, help="rounds per cell left out of the medians")
    ap.add_argument("--cell-steps", nargs="*", default=[], help="per-cell override, e.g. s/64=6")
    ap.add_argument(
        "--micro-batch",
        type=int,
        default=0,
        help="rows per training forward/backward for every implementation (0 = assets.micro_batch_rows: "
        "64 unless the cell's activations would pass 2 GiB)",
    )
    ap.add_argument(
        "--trl-python",
        default=_default_trl_python(),
        help="a Python with TRL installed (default: this one when it has TRL, so TRL runs on the same torch; "
        "'none': no TRL column)",
    )
    ap.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"], help="compute dtype of every side")
    ap.add_argument(
        "--ours-compile",
        default="true",
        choices=["true", "false", "null"],
        help="ours' actor.use_torch_compile (null: the trainer's own decision for this short run, i.e. off)",
    )
    ap.add_argument(
        "--worker-threads",
        type=int,
        default=2,
        help="torch threads of our Ray worker (OMP_NUM_THREADS); 2 = the cores, as bare/TRL",
    )
    ap.add_argument("--threads", type=int, default=0, help="torch threads of bare/TRL (0 = torch's default)")
    ap.add_argument("--assets", default="/tmp/grpo_step_assets", help="where the model folders are built")
    ap.add_argument("--out", default="/tmp/grpo_step_results", help="per-cell JSON, logs, table.md")
    ap.add_argument(
        "--peak-gflops",
        type=float,
        default=None,
        help="matmul rate for MFU instead of the best measured one (e.g. a quiet machine's)",
    )
    ap.add_argument(
        "--before",
        default=before.DEFAULT_REV,
        help="commit whose trainer is the ours_before column (a git worktree of it); 'none': no column",
    )
    ap.add_argument(
        "--before-worktree", default=str(before.DEFAULT_WORKTREE), help="where that worktree lives"
    )
    ap.add_argument(
        "--after-overrides",
        nargs="*",
        default=[],
        help="key=value config overrides of our (after) step only, on top of ours.AFTER, e.g. actor_rollout_ref.rollout.name=hf",
    )
    ap.add_argument("--render", action="store_true", help="only re-render --out's saved results")
    add_omp_wait_policy_arg(ap)
    args = ap.parse_args()
    apply_omp_wait_policy(args.omp_wait_policy)  # every process started below inherits it
    if args.render:
        _render_saved(args)
        return
    if args.trl_python and args.trl_python.lower() == "none":
        args.trl_python = None
    if args.trl_python and not Path(args.trl_python).exists():
        raise SystemExit(
            f"--trl-python {args.trl_python}: no such file (create the venv first, see README.md)"
        )

    worktree = None
    if args.before.lower() != "none":
        worktree = before.ensure_worktree(args.before, Path(args.before_worktree))
        print(f"ours_before: commit {args.before} in {worktree}", flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    overrides = _parse_cell_steps(args.cell_steps)
    models = {size: assets.ensure_model(size, Path(args.assets)) for size in args.sizes}
    t_start = time.perf_counter()
    matmul = [_matmul(args.threads, args.dtype)]
    print(
        f"matmul before: {matmul[0]['best_gflops']:.1f} GFLOP/s best, {matmul[0]['median_gflops']:.1f} median",
        flush=True,
    )
    cells = []
    for size in args.sizes:
        for length in args.lengths:
            steps = overrides.get((size, length), args.steps)
            out_json = out / f"{size}_L{length}.json"
            micro = args.micro_batch or assets.micro_batch_rows(size, length)
            cmd = [
                sys.executable,
                str(HERE / "cell.py"),
                "--model",
                str(models[size]),
                "--new-tokens",
                str(length),
                "--steps",
                str(steps),
                "--warmup",
                str(args.warmup),
                "--out-json",
                str(out_json),
                "--worker-threads",
                str(args.worker_threads),
                "--threads",
                str(args.threads),
                "--micro-batch",
                str(micro),
                "--dtype",
                args.dtype,
                "--ours-compile",
                args.ours_compile,
            ]
            if args.trl_python:
                cmd += ["--trl-python", args.trl_python]
            if worktree is not None:
                cmd += ["--before-worktree", str(worktree)]
            if args.after_overrides:
                cmd += ["--after-overrides", *args.after_overrides]
            print(
                f"cell {size}/{length}: {args.warmup} warm-up + {steps} rounds, micro-batch {micro} ...",
                flush=True,
            )
            log = out / f"{size}_L{length}_cell.log"
            with open(log, "w") as f:
                proc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env={**os.environ})
            if proc.returncode != 0:
                raise SystemExit(f"cell {size}/{length} failed (exit {proc.returncode}); see {log}")
            cell = json.loads(out_json.read_text())
            cell["size"] = size
            cells.append(cell)
            print(report.row_line(report.summarize(cell, size, matmul)), flush=True)
    matmul.append(_matmul(args.threads, args.dtype))
    (out / "matmul.json").write_text(json.dumps(matmul))
    text = report.render(cells, matmul, args, time.perf_counter() - t_start, args.peak_gflops)
    (out / "table.md").write_text(text)
    print(text)
    print(f"raw records: {out}/*.json; this table: {out / 'table.md'}")


if __name__ == "__main__":
    main()
