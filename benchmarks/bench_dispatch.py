"""Single-controller dispatch latency through the public API only, so the same file times upstream verl.

    uv run python benchmarks/bench_dispatch.py                      # this repo's verl
    uv run python benchmarks/bench_dispatch.py --compare /work/venv-upstream/bin/python

Rows (2 CPU-only Ray workers, RayResourcePool(use_gpu=False, max_colocate_count=1)):
  * a no-op ONE_TO_ALL call,
  * a DP_COMPUTE_PROTO echo of a tiny batch (4 rows x 8),
  * a DP_COMPUTE_PROTO echo of ~100 MiB (two int64 tensors [6400, 1024] + a uid object array).
Each row is the median over --reps calls after warm-up. A fourth row calls the same actors' no-op
method directly (`actor.noop.remote()` per worker + one `ray.get`): Ray's floor for the no-op row. With --compare, each round runs a fresh
process under each interpreter (alternating which goes first, so machine-load drift hits both sides
alike); the table shows the median over rounds and the median of the per-round ratios ours / upstream.
The measurements mirror ../shared/anchors/verl_anchor/bench_dispatch.py.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

# Driver started by `uv run`: keep Ray from rebuilding the project environment for every worker.
os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
os.environ.setdefault("OMP_NUM_THREADS", "1")

ROWS = ("ONE_TO_ALL noop", "DP_COMPUTE_PROTO echo, tiny", "DP_COMPUTE_PROTO echo, ~100 MiB")
# Ray's own floor for the no-op row: the same two actors' method called directly, no worker group.
BARE_ROW = "bare Ray: actor.noop.remote() per worker + ray.get"


def _median_time(fn, reps: int, warmup: int) -> float:
    times = []
    for i in range(warmup + reps):
        t0 = time.perf_counter()
        fn()
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def run(workers: int, reps: int, big_mb: float) -> dict:
    """Start Ray and a worker group in this process, time the rows, return {"rows": {row: s}, ...}."""
    import numpy as np
    import ray
    import torch
    from verl import DataProto
    from verl.single_controller.base import Worker
    from verl.single_controller.base.decorator import Dispatch, register
    from verl.single_controller.ray import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup

    @ray.remote
    class EchoWorker(Worker):
        @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
        def echo(self, data):
            return data

        @register(dispatch_mode=Dispatch.ONE_TO_ALL)
        def noop(self):
            return None

    def make(rows: int, seqlen: int) -> DataProto:
        return DataProto.from_dict(
            tensors={
                "input_ids": torch.randint(0, 32000, (rows, seqlen), dtype=torch.int64),
                "attention_mask": torch.ones(rows, seqlen, dtype=torch.int64),
            },
            non_tensors={"uid": np.array([f"u{i}" for i in range(rows)], dtype=object)},
        )

    t0 = time.perf_counter()
    ray.init(num_cpus=max(4, 2 * workers), include_dashboard=False, log_to_driver=False)
    init_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    pool = RayResourcePool(process_on_nodes=[workers], use_gpu=False, max_colocate_count=1)
    wg = RayWorkerGroup(resource_pool=pool, ray_cls_with_init=RayClassWithInitArgs(cls=EchoWorker))
    wg.noop()
    start_s = time.perf_counter() - t0

    tiny = make(2 * workers, 8)
    seqlen = 1024
    big_rows = int(big_mb * 2**20 / (2 * 8 * seqlen))
    big_rows -= big_rows % workers
    big = make(big_rows, seqlen)
    for data in (tiny, big):  # the echo must be exact before it is timed
        out = wg.echo(data)
        assert len(out) == len(data) and torch.equal(out.batch["input_ids"], data.batch["input_ids"])
        assert list(out.non_tensor_batch["uid"]) == list(data.non_tensor_batch["uid"])

    actors = wg.workers

    def bare_noop():
        return ray.get([a.noop.remote() for a in actors])

    rows = {
        ROWS[0]: _median_time(wg.noop, reps * 10, warmup=5),
        BARE_ROW: _median_time(bare_noop, reps * 10, warmup=5),
        ROWS[1]: _median_time(lambda: wg.echo(tiny), reps * 5, warmup=3),
        ROWS[2]: _median_time(lambda: wg.echo(big), reps, warmup=1),
    }
    big_mib = sum(t.numel() * t.element_size() for t in big.batch.values()) / 2**20
    ray.shutdown()
    return {
        "rows": rows,
        "ray_init_s": init_s,
        "group_start_s": start_s,
        "big_mib": big_mib,
        "big_rows": big_rows,
    }


def _fmt(s: float) -> str:
    return f"{s * 1e3:9.2f} ms" if s < 1.0 else f"{s:9.3f} s "


def _run_side(python: str, args) -> dict:
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        path = f.name
    cmd = [
        python,
        os.path.abspath(__file__),
        "--child",
        path,
        "--workers",
        str(args.workers),
        "--reps",
        str(args.reps),
        "--big-mb",
        str(args.big_mb),
    ]
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    # cwd outside the repo so an upstream interpreter cannot pick up this workspace's sources
    subprocess.run(cmd, check=True, env=env, cwd=tempfile.gettempdir())
    with open(path) as f:
        result = json.load(f)
    os.unlink(path)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--big-mb", type=float, default=100.0)
    ap.add_argument("--rounds", type=int, default=2, help="alternating rounds with --compare")
    ap.add_argument("--compare", metavar="PYTHON", help="interpreter with upstream verl installed")
    ap.add_argument("--child", metavar="JSON", help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.child:
        with open(args.child, "w") as f:
            json.dump(run(args.workers, args.reps, args.big_mb), f)
        return

    sides = {"ours": sys.executable}
    if args.compare:
        sides["upstream"] = args.compare
    results: dict[str, list[dict]] = {name: [] for name in sides}
    for r in range(args.rounds if args.compare else 1):
        # alternate which side goes first, so load drift hits both alike
        for name in list(sides) if r % 2 == 0 else list(sides)[::-1]:
            results[name].append(_run_side(sides[name], args))

    all_rows = (*ROWS, BARE_ROW)
    med = {
        name: {row: statistics.median(r["rows"][row] for r in runs) for row in all_rows}
        for name, runs in results.items()
    }
    info = results["ours"][0]
    print(
        f"# dispatch: {args.workers} CPU workers, big payload {info['big_rows']} rows x 1024 x 2 int64 "
        f"= {info['big_mib']:.0f} MiB; medians over reps (and over {len(results['ours'])} round(s)); "
        f"ratio = median of per-round ratios; loadavg {os.getloadavg()[0]:.2f}"
    )
    for name, runs in results.items():
        print(
            f"# {name}: ray.init {statistics.median(r['ray_init_s'] for r in runs):.1f} s, worker group start "
            f"{statistics.median(r['group_start_s'] for r in runs):.1f} s"
        )
    header = f"{'row':34s} {'ours':>12s}"
    if args.compare:
        header += f" {'upstream':>12s} {'ours/upstream':>14s}"
    print(header)
    for row in all_rows:
        line = f"{row:34s} {_fmt(med['ours'][row]):>12s}"
        if args.compare:
            ratios = [a["rows"][row] / b["rows"][row] for a, b in zip(results["ours"], results["upstream"])]
            line += f" {_fmt(med['upstream'][row]):>12s} {statistics.median(ratios):14.2f}"
        print(line)


if __name__ == "__main__":
    main()
