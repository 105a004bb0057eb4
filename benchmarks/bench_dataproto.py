"""DataProto micro-benchmarks through the public API only, so the same file times upstream verl.

    uv run python benchmarks/bench_dataproto.py                      # this repo's verl
    uv run python benchmarks/bench_dataproto.py --compare /work/venv-upstream/bin/python

With --compare, each round runs a fresh worker process under this interpreter and then one under
PYTHON (alternating, so machine-load drift hits both sides alike), and the table shows the median
over rounds of each side's per-op median, plus the ratio ours / upstream.

The batch mirrors ../shared/anchors/verl_anchor/bench_dataproto.py: B rows x L tokens with
input_ids, attention_mask, responses (int64) and old_log_probs (float32) = 28 MiB at B=L=1024,
plus two object arrays (uid strings, extra_info dicts).
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import statistics
import subprocess
import sys
import time


def _timeit(fn, reps: int, setup=None, warmup: int = 1) -> float:
    """Median seconds of fn() (or fn(setup()) when setup is given; setup is not timed)."""
    times = []
    for i in range(warmup + reps):
        arg = setup() if setup is not None else None
        t0 = time.perf_counter()
        fn() if setup is None else fn(arg)
        dt = time.perf_counter() - t0
        if i >= warmup:
            times.append(dt)
    return statistics.median(times)


def _inputs(B: int, L: int, seed: int = 0):
    import numpy as np
    import torch

    g = torch.Generator().manual_seed(seed)
    tensors = {
        "input_ids": torch.randint(0, 32000, (B, L), dtype=torch.int64, generator=g),
        "attention_mask": torch.ones(B, L, dtype=torch.int64),
        "responses": torch.randint(0, 32000, (B, L), dtype=torch.int64, generator=g),
        "old_log_probs": torch.randn(B, L, dtype=torch.float32, generator=g),
    }
    uid = np.array([f"uid-{i:06d}" for i in range(B)], dtype=object)
    extra = np.empty(B, dtype=object)
    for i in range(B):
        extra[i] = {"index": i, "ground_truth": str(i % 97)}
    return tensors, {"uid": uid, "extra_info": extra}


def run_ops(B: int, L: int, reps: int) -> dict:
    """Time every op in this process; returns {"rows": {op: seconds}, "pickle_bytes": n}."""
    import numpy as np
    import torch
    from verl import DataProto

    torch.set_num_threads(max(1, os.cpu_count() or 1))
    rows: dict[str, float] = {}

    def build():
        tensors, non_tensors = _inputs(B, L)
        return DataProto.from_dict(tensors=tensors, non_tensors=non_tensors, meta_info={"step": 1})

    rows["build: random tensors + from_dict (anchor's from_dict row)"] = _timeit(build, reps)
    rows["from_dict only (inputs prebuilt)"] = _timeit(
        lambda inp: DataProto.from_dict(tensors=inp[0], non_tensors=inp[1], meta_info={"step": 1}),
        reps,
        setup=lambda: _inputs(B, L),
    )
    data = build()
    chunks8 = data.chunk(8)
    rows["chunk(8)"] = _timeit(lambda: data.chunk(8), reps)
    rows["concat(8 chunks)"] = _timeit(lambda: DataProto.concat(chunks8), reps)

    right = data.select(batch_keys=["old_log_probs"], non_tensor_batch_keys=["extra_info"])

    def fresh_left():  # union mutates its left side
        return DataProto.from_dict(
            tensors={k: data.batch[k] for k in ("input_ids", "attention_mask", "responses")},
            non_tensors={"uid": data.non_tensor_batch["uid"]},
            meta_info={"step": 1},
        )

    rows["union (3 tensors + 1 obj) with (1 tensor + 1 obj)"] = _timeit(
        lambda left: left.union(right), reps, setup=fresh_left
    )
    rows["select(batch_keys=2, non_tensor_keys=1)"] = _timeit(
        lambda: data.select(batch_keys=["input_ids", "attention_mask"], non_tensor_batch_keys=["uid"]), reps
    )
    rows["slice data[0:B/2]"] = _timeit(lambda: data[0 : B // 2], reps)
    idx = np.random.default_rng(0).permutation(B)[: B // 2]
    rows["index select data[np array of B/2 random rows]"] = _timeit(lambda: data[idx], reps)
    idx_list = idx.tolist()
    rows["index select data[python list of B/2 rows]"] = _timeit(lambda: data[idx_list], reps)
    mask = np.zeros(B, dtype=bool)
    mask[::2] = True
    rows["bool-mask select (B/2 rows)"] = _timeit(lambda: data[mask], reps)
    rows["repeat(8, interleave=True)"] = _timeit(lambda: data.repeat(repeat_times=8, interleave=True), reps)
    rows["to('cpu')"] = _timeit(lambda: data.to("cpu"), reps)

    blob = pickle.dumps(data, protocol=pickle.HIGHEST_PROTOCOL)
    rows["pickle.dumps"] = _timeit(lambda: pickle.dumps(data, protocol=pickle.HIGHEST_PROTOCOL), reps)
    rows["pickle.loads"] = _timeit(lambda: pickle.loads(blob), reps)
    rows["pickle round-trip (dumps+loads)"] = _timeit(
        lambda: pickle.loads(pickle.dumps(data, protocol=pickle.HIGHEST_PROTOCOL)), reps
    )

    # Sanity checks, so an implementation cannot win by doing nothing.
    assert len(DataProto.concat(chunks8)) == B
    rep = data.repeat(repeat_times=8, interleave=True)
    assert len(rep) == 8 * B and torch.equal(rep.batch["input_ids"][8 * 3 + 5], data.batch["input_ids"][3])
    assert torch.equal(data[idx].batch["responses"], data.batch["responses"][torch.from_numpy(idx)])
    assert list(data[mask].non_tensor_batch["uid"]) == list(data.non_tensor_batch["uid"][::2])
    rt = pickle.loads(blob)
    assert torch.equal(rt.batch["old_log_probs"], data.batch["old_log_probs"])
    assert list(rt.non_tensor_batch["extra_info"][:3]) == list(data.non_tensor_batch["extra_info"][:3])
    nbytes = sum(t.numel() * t.element_size() for t in data.batch.values())
    return {"rows": rows, "pickle_bytes": len(blob), "tensor_bytes": nbytes}


def import_time(python: str, statement: str = "import verl") -> float:
    """Wall time of a whole `python -c statement` process."""
    t0 = time.perf_counter()
    subprocess.run([python, "-c", statement], check=True, cwd="/")
    return time.perf_counter() - t0


def measure(python: str, B: int, L: int, reps: int) -> dict:
    """One fresh worker process under `python` (this file with --worker), plus the import timings."""
    out = subprocess.run(
        [
            python,
            os.path.abspath(__file__),
            "--worker",
            "--batch",
            str(B),
            "--seqlen",
            str(L),
            "--reps",
            str(reps),
        ],
        check=True,
        capture_output=True,
        text=True,
        cwd="/",  # so the repo's source tree is not on the upstream interpreter's path
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    result["rows"]["process: python -c 'import verl'"] = import_time(python)
    result["rows"]["process: python -c 'from verl import DataProto'"] = import_time(
        python, "from verl import DataProto"
    )
    return result


def _fmt(s: float) -> str:
    if s < 1e-3:
        return f"{s * 1e6:.1f} us"
    if s < 1.0:
        return f"{s * 1e3:.2f} ms"
    return f"{s:.2f} s"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--seqlen", type=int, default=1024)
    ap.add_argument("--reps", type=int, default=7, help="timed repetitions per op in each worker (median)")
    ap.add_argument("--rounds", type=int, default=3, help="worker processes per interpreter (alternating)")
    ap.add_argument("--compare", metavar="PYTHON", help="interpreter with upstream verl installed")
    ap.add_argument("--json", help="write the raw numbers here")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.worker:
        print(json.dumps(run_ops(args.batch, args.seqlen, args.reps)))
        return

    sides = {"ours": sys.executable}
    if args.compare:
        sides["upstream"] = args.compare
    runs: dict[str, list[dict]] = {name: [] for name in sides}
    for r in range(args.rounds):
        for name, python in sides.items():
            runs[name].append(measure(python, args.batch, args.seqlen, args.reps))
            print(f"round {r + 1}/{args.rounds}: {name} done", file=sys.stderr)

    med = {
        name: {op: statistics.median(run["rows"][op] for run in rs) for op in rs[0]["rows"]}
        for name, rs in runs.items()
    }
    ours = runs["ours"][0]
    print(
        f"# DataProto benchmark: B={args.batch} L={args.seqlen}, tensor payload {ours['tensor_bytes'] / 2**20:.1f} MiB, "
        f"median of {args.reps} reps per worker, median over {args.rounds} alternating rounds, "
        f"{os.cpu_count()} CPUs, loadavg {os.getloadavg()[0]:.2f}"
    )
    if args.compare:
        up = runs["upstream"][0]
        print(
            f"# pickle size: ours {ours['pickle_bytes'] / 2**20:.2f} MiB, upstream {up['pickle_bytes'] / 2**20:.2f} MiB\n"
        )
        print("| op | ours | upstream verl | ours / upstream |")
        print("|---|---|---|---|")
        for op, t in med["ours"].items():
            u = med["upstream"].get(op)
            ratio = f"{t / u:.2f}" if u else "n/a"
            print(f"| {op} | {_fmt(t)} | {_fmt(u) if u else 'n/a'} | {ratio} |")
    else:
        print(f"# pickle size: {ours['pickle_bytes'] / 2**20:.2f} MiB\n")
        print("| op | median |")
        print("|---|---|")
        for op, t in med["ours"].items():
            print(f"| {op} | {_fmt(t)} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "runs": runs, "median": med}, f, indent=2)


if __name__ == "__main__":
    main()
