"""Single-controller dispatch latency through the public API only, so the same file times upstream verl.

    uv run python benchmarks/bench_dispatch.py                      # this repo's verl
    uv run python benchmarks/bench_dispatch.py --compare /work/venv-upstream/bin/python

Rows (2 CPU-only Ray workers, RayResourcePool(use_gpu=False, max_colocate_count=1)):
  * a no-op ONE_TO_ALL call,
  * a DP_COMPUTE_PROTO echo of a tiny batch (4 rows x 8),
  * a DP_COMPUTE_PROTO echo of ~100 MiB (two int64 tensors [6400, 1024] + a uid object array).
Each row is the median over calls after warm-up (--reps x 10 for the no-op rows, x 5 for the tiny
echo, x 1 for the big one). A fourth row calls the same actors' no-op method directly
(`actor.noop.remote()` per worker + one `ray.get`): Ray's own floor for the no-op row.

With --compare, one persistent child per interpreter starts its own Ray cluster and worker group once; then, row by row and round by round,
the two children time the same row back to back (alternating which goes first), so load drift on a
shared machine hits both sides alike. The table shows each side's median over rounds and the median
of the per-round ratios ours / upstream.
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

from alternating import alternate  # benchmarks/ is the script's folder, first on sys.path

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


def setup(workers: int, big_mb: float) -> tuple[dict, dict]:
    """Start Ray and a worker group in this process; return ({row: (fn, reps factor, warmup)}, info)."""
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
        ROWS[0]: (wg.noop, 10, 5),
        BARE_ROW: (bare_noop, 10, 5),
        ROWS[1]: (lambda: wg.echo(tiny), 5, 3),
        ROWS[2]: (lambda: wg.echo(big), 1, 1),
    }
    big_mib = sum(t.numel() * t.element_size() for t in big.batch.values()) / 2**20
    info = {"ray_init_s": init_s, "group_start_s": start_s, "big_mib": big_mib, "big_rows": big_rows}
    return rows, info


def serve(workers: int, big_mb: float) -> None:
    """Child process: set up once, then answer "<reps> <row>" lines on stdin with one JSON time each."""
    import ray

    rows, info = setup(workers, big_mb)
    print(json.dumps(info), flush=True)
    for line in sys.stdin:
        reps, row = line.rstrip("\n").split(" ", 1)
        fn, factor, warmup = rows[row]
        print(json.dumps(_median_time(fn, int(reps) * factor, warmup)), flush=True)
    ray.shutdown()


def _fmt(s: float) -> str:
    return f"{s * 1e3:9.2f} ms" if s < 1.0 else f"{s:9.3f} s "


class Side:
    """A persistent child process (one interpreter, its own Ray cluster and worker group)."""

    def __init__(self, python: str, args):
        cmd = [python, os.path.abspath(__file__), "--serve", "--workers", str(args.workers)]
        cmd += ["--big-mb", str(args.big_mb)]
        env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
        # cwd outside the repo so an upstream interpreter cannot pick up this workspace's sources
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=tempfile.gettempdir()
        )
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"benchmark child {python} exited during set-up (see its stderr above)")
        self.info = json.loads(line)

    def time(self, row: str, reps: int) -> float:
        self.proc.stdin.write(f"{reps} {row}\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--big-mb", type=float, default=100.0)
    ap.add_argument("--rounds", type=int, default=5, help="alternating rounds")
    ap.add_argument("--compare", metavar="PYTHON", help="interpreter with upstream verl installed")
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.serve:
        serve(args.workers, args.big_mb)
        return

    pythons = {"ours": sys.executable}
    if args.compare:
        pythons["upstream"] = args.compare
    sides = {name: Side(python, args) for name, python in pythons.items()}
    # both sides' clusters are up at once; each row runs on both back to back, alternating who goes first
    all_rows = [*ROWS, BARE_ROW]
    times = alternate(sides, all_rows, args.rounds, args.reps)
    for side in sides.values():
        side.close()

    med = {name: {row: statistics.median(ts) for row, ts in per.items()} for name, per in times.items()}
    info = sides["ours"].info
    print(
        f"# dispatch: {args.workers} CPU workers, big payload {info['big_rows']} rows x 1024 x 2 int64 "
        f"= {info['big_mib']:.0f} MiB; per row: median over {args.rounds} alternating rounds of the median "
        f"of the reps; ratio = median of per-round ratios; loadavg {os.getloadavg()[0]:.2f}"
    )
    for name, side in sides.items():
        print(
            f"# {name}: ray.init {side.info['ray_init_s']:.1f} s, worker group start {side.info['group_start_s']:.1f} s"
        )
    header = f"{'row':52s} {'ours':>12s}"
    if args.compare:
        header += f" {'upstream':>12s} {'ours/upstream':>14s}"
    print(header)
    for row in all_rows:
        line = f"{row:52s} {_fmt(med['ours'][row]):>12s}"
        if args.compare:
            ratios = [a / b for a, b in zip(times["ours"][row], times["upstream"][row])]
            line += f" {_fmt(med['upstream'][row]):>12s} {statistics.median(ratios):14.2f}"
        print(line)


if __name__ == "__main__":
    main()
