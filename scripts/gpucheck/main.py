"""The prepared GPU check (``scripts/gpu_check``; docs/gpu.md). Runs within ``--budget`` seconds:

1. setup: the carried wheels (``.gpu_wheels``) into a fresh target folder, our packages' ``src/`` on the
   path with their entry-point metadata (``site_setup.py``);
2. sections, each its own process with its own time limit (``procs.py``): ``machine`` (card, versions,
   commit, matmul ceiling), ``gpu_tests`` (``pytest -m gpu``), ``correctness`` (FSDP2 bf16 with fp32
   masters, native and hf rollouts, rollout vs actor log-probs, checkpoint resume), ``megatron`` (TP=1
   against FSDP2), ``e2e`` (the demo: SFT then GRPO), ``speed`` (Qwen2.5-0.5B/1.5B shapes, ours vs TRL);
3. ``gpu_check.json`` (everything), ``gpu_check.md`` (the tables) and ``gpu_check.log`` (every section's
   output) in ``--out``; the tables are printed last.

A failing, hanging or crashing section is recorded with its log's tail and the others still run; the
exit status is non-zero when any section did not pass.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import site_setup  # noqa: E402
import tables  # noqa: E402
from procs import run_section, tail  # noqa: E402

#: (section, seconds it may take on the GPU); the CPU dry run gets CPU_FACTOR times as long.
#: Expected on an H100 (not yet measured: docs/gpu.md): well under each limit; speed takes what is left.
SECTIONS = (("machine", 60), ("gpu_tests", 90), ("correctness", 100), ("megatron", 75), ("e2e", 150), ("speed", None))
CPU_FACTOR = 3
#: seconds kept back for writing the report
RESERVE_S = 10
#: a section is skipped when less than this is left for it
MIN_SECTION_S = 20
LOG_CAP_BYTES = 512 << 10  # per log: the combined file stays far under the 16 MiB a file may come back with


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="scripts/gpu_check", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.environ.get("OUT") or "gpu_check_out", help="output folder (default: $OUT)")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--quick", action="store_true", help="toy sizes: the CPU dry run of every code path")
    ap.add_argument("--budget", type=float, default=None,
                    help="seconds for the whole check (default 480 on cuda: 8 minutes, so a second try fits the "
                         "device's 15; 1200 on cpu)")
    ap.add_argument("--wheels", default=str(site_setup.ROOT / ".gpu_wheels"), help="folder of wheels to install")
    ap.add_argument("--site", default=None, help="where to install them (default: a fresh temporary folder)")
    ap.add_argument("--sections", nargs="+", default=[s for s, _ in SECTIONS], choices=[s for s, _ in SECTIONS])
    ap.add_argument("--keep-work", action="store_true",
                    help="keep the work folder (model folders, per-section logs); by default it is removed once "
                         "gpu_check.log holds the logs")
    args = ap.parse_args(argv)
    if args.budget is None:
        args.budget = 480.0 if args.device == "cuda" else 1200.0
    return args


def combined_log(work: Path, out: Path) -> None:
    """Every log of the run into one file (a device call brings back at most 8 files), each capped."""
    with (out / "gpu_check.log").open("w") as f:
        for log in sorted(work.rglob("*.log")):
            size = log.stat().st_size
            f.write(f"\n===== {log.relative_to(work)} ({size} bytes{', tail only' if size > LOG_CAP_BYTES else ''})\n")
            f.write(tail(log, LOG_CAP_BYTES))


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    start = time.time()
    deadline = start + args.budget
    out = Path(args.out).absolute()
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="verl_gpu_check_"))
    site = Path(args.site) if args.site else work / "site"
    result = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(start)), "device": args.device,
              "quick": args.quick, "budget_s": args.budget, "python": sys.executable,
              "command": "scripts/gpu_check " + " ".join(shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:])),
              "work": str(work), "sections": {}}
    try:
        result["setup"] = site_setup.setup(Path(args.wheels), site)
    except Exception as e:  # recorded; the sections then show what is missing
        result["setup"] = {"error": f"{type(e).__name__}: {e}"}
    child_env = site_setup.section_env(site)
    base = ["--device", args.device, *(["--quick"] if args.quick else [])]
    for name, cap in SECTIONS:
        if name not in args.sections:
            continue
        left = deadline - time.time() - RESERVE_S
        limit = left if cap is None else min(cap * (CPU_FACTOR if args.device == "cpu" else 1), left)
        if limit < MIN_SECTION_S:
            result["sections"][name] = {"status": "skipped", "error": f"{left:.0f} s of the budget left"}
            continue
        extra = ["--deadline", str(time.time() + limit)]
        matmul = result["sections"].get("machine", {}).get("checks", {}).get("matmul", {}).get("median_tflops")
        if matmul and args.device == "cuda":
            extra += ["--option", f"matmul_tflops={matmul}"]
        print(f"=== {name} (limit {limit:.0f} s)", flush=True)
        result["sections"][name] = run_section(name, base + extra, child_env, work, limit)
        print(f"    {result['sections'][name]['status']} in {result['sections'][name]['seconds']} s", flush=True)
    result["seconds"] = round(time.time() - start, 1)
    (out / "gpu_check.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    table = tables.render(result)
    (out / "gpu_check.md").write_text(table + "\n")
    combined_log(work, out)
    if not args.keep_work:
        shutil.rmtree(work, ignore_errors=True)
    print(table, flush=True)
    print(f"\nwritten: {out / 'gpu_check.json'}, {out / 'gpu_check.md'}, {out / 'gpu_check.log'}", flush=True)
    return 0 if all(s.get("status") == "ok" for s in result["sections"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
