"""DataProto micro-benchmarks through the public API only, so the same file times upstream verl.

    uv run python benchmarks/bench_dataproto.py                      # this repo's verl
    uv run python benchmarks/bench_dataproto.py --compare /work/venv-upstream/bin/python

With --compare, one persistent worker process per interpreter builds the batch once; then, op by op
and round by round, the two workers time the same op back to back (alternating which goes first),
so load drift on a shared machine hits both sides alike. The table shows each side's median and
the median of the per-round ratios ours / upstream. Whole-process import times are measured last.

Copy rows also get a "plain torch" column per interpreter: the same tensor work done with bare torch
calls (torch.cat / torch.index_select / repeat_interleave / the random inputs alone) on the same
tensors in the same worker, the floor a DataProto op cannot go much below.

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

from alternating import alternate  # benchmarks/ is the script's folder, first on sys.path


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


def build_ops(B: int, L: int, threads: int = 0) -> dict:
    """name -> (fn, setup or None). Sanity checks run once here, so an implementation cannot win
    by doing nothing."""
    import numpy as np
    import torch
    from verl import DataProto

    # both sides: --threads, or every CPU this process may run on (its affinity mask, not the host's
    # count); the trainer's driver, where DataProto ops run between workers, uses 1
    torch.set_num_threads(threads or len(os.sched_getaffinity(0)))

    def build():
        tensors, non_tensors = _inputs(B, L)
        return DataProto.from_dict(tensors=tensors, non_tensors=non_tensors, meta_info={"step": 1})

    data = build()
    chunks8 = data.chunk(8)
    right = data.select(batch_keys=["old_log_probs"], non_tensor_batch_keys=["extra_info"])

    def fresh_left():  # union mutates its left side
        return DataProto.from_dict(
            tensors={k: data.batch[k] for k in ("input_ids", "attention_mask", "responses")},
            non_tensors={"uid": data.non_tensor_batch["uid"]},
            meta_info={"step": 1},
        )

    idx = np.random.default_rng(0).permutation(B)[: B // 2]
    idx_list = idx.tolist()
    mask = np.zeros(B, dtype=bool)
    mask[::2] = True
    blob = pickle.dumps(data, protocol=pickle.HIGHEST_PROTOCOL)

    assert len(DataProto.concat(chunks8)) == B
    assert torch.equal(DataProto.concat(chunks8).batch["input_ids"], data.batch["input_ids"])
    rep = data.repeat(repeat_times=8, interleave=True)
    assert len(rep) == 8 * B and torch.equal(rep.batch["input_ids"][8 * 3 + 5], data.batch["input_ids"][3])
    del rep
    assert torch.equal(data[idx].batch["responses"], data.batch["responses"][torch.from_numpy(idx)])
    assert list(data[mask].non_tensor_batch["uid"]) == list(data.non_tensor_batch["uid"][::2])
    rt = pickle.loads(blob)
    assert torch.equal(rt.batch["old_log_probs"], data.batch["old_log_probs"])
    assert list(rt.non_tensor_batch["extra_info"][:3]) == list(data.non_tensor_batch["extra_info"][:3])

    # "plain torch" floors: the same tensor work done with bare torch calls on the same tensors (no
    # DataProto, no object arrays), timed in the same worker, so readers see what the copy itself costs.
    tensors = dict(data.batch.items())
    chunk_parts = {k: [c.batch[k] for c in chunks8] for k in tensors}
    idx_t = torch.from_numpy(idx)

    def plain_index(index):
        return {k: torch.index_select(t, 0, index) for k, t in tensors.items()}

    floors = {
        "build: random tensors + from_dict (anchor's from_dict row)": lambda: _inputs(B, L),
        "concat(8 chunks)": lambda: {k: torch.cat(parts) for k, parts in chunk_parts.items()},
        "index select data[np array of B/2 random rows]": lambda: plain_index(idx_t),
        "index select data[python list of B/2 rows]": lambda: plain_index(torch.tensor(idx_list)),
        "bool-mask select (B/2 rows)": lambda: plain_index(torch.from_numpy(mask).nonzero().squeeze(1)),
        "repeat(8, interleave=True)": lambda: {k: t.repeat_interleave(8, dim=0) for k, t in tensors.items()},
    }
    return {
        **{f"floor: {name}": (fn, None) for name, fn in floors.items()},
        "build: random tensors + from_dict (anchor's from_dict row)": (build, None),
        "from_dict only (inputs prebuilt)": (
            lambda inp: DataProto.from_dict(tensors=inp[0], non_tensors=inp[1], meta_info={"step": 1}),
            lambda: _inputs(B, L),
        ),
        "chunk(8)": (lambda: data.chunk(8), None),
        "concat(8 chunks)": (lambda: DataProto.concat(chunks8), None),
        "union (3 tensors + 1 obj) with (1 tensor + 1 obj)": (lambda left: left.union(right), fresh_left),
        "select(batch_keys=2, non_tensor_keys=1)": (
            lambda: data.select(batch_keys=["input_ids", "attention_mask"], non_tensor_batch_keys=["uid"]),
            None,
        ),
        "slice data[0:B/2]": (lambda: data[0 : B // 2], None),
        "index select data[np array of B/2 random rows]": (lambda: data[idx], None),
        "index select data[python list of B/2 rows]": (lambda: data[idx_list], None),
        "bool-mask select (B/2 rows)": (lambda: data[mask], None),
        "repeat(8, interleave=True)": (lambda: data.repeat(repeat_times=8, interleave=True), None),
        "to('cpu')": (lambda: data.to("cpu"), None),
        "pickle.dumps": (lambda: pickle.dumps(data, protocol=pickle.HIGHEST_PROTOCOL), None),
        "pickle.loads": (lambda: pickle.loads(blob), None),
        "pickle round-trip (dumps+loads)": (
            lambda: pickle.loads(pickle.dumps(data, protocol=pickle.HIGHEST_PROTOCOL)),
            None,
        ),
        "_info": (len(blob), sum(t.numel() * t.element_size() for t in data.batch.values())),
    }


def worker(B: int, L: int, threads: int) -> None:
    """Serve timing requests on stdin ("<reps> <op name>" per line), answer one JSON line each."""
    ops = build_ops(B, L, threads)
    pickle_bytes, tensor_bytes = ops.pop("_info")
    print(
        json.dumps({"ops": list(ops), "pickle_bytes": pickle_bytes, "tensor_bytes": tensor_bytes}), flush=True
    )
    for line in sys.stdin:
        reps, name = line.rstrip("\n").split(" ", 1)
        fn, setup = ops[name]
        print(json.dumps(_timeit(fn, int(reps), setup=setup)), flush=True)


class Side:
    """A persistent worker process running this file under one interpreter."""

    def __init__(self, python: str, B: int, L: int, threads: int):
        self.python = python
        self.proc = subprocess.Popen(
            [
                python,
                os.path.abspath(__file__),
                "--worker",
                "--batch",
                str(B),
                "--seqlen",
                str(L),
                "--threads",
                str(threads),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd="/",  # keep this repo's source tree off the upstream interpreter's path
        )
        self.info = json.loads(self.proc.stdout.readline())

    def time(self, name: str, reps: int) -> float:
        self.proc.stdin.write(f"{reps} {name}\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait()


def import_time(python: str, statement: str = "import verl") -> float:
    """Wall time of a whole `python -c statement` process."""
    t0 = time.perf_counter()
    subprocess.run([python, "-c", statement], check=True, cwd="/")
    return time.perf_counter() - t0


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
    ap.add_argument("--reps", type=int, default=5, help="timed repetitions per op per round (median)")
    ap.add_argument("--rounds", type=int, default=5, help="alternating rounds over all ops")
    ap.add_argument("--import-reps", type=int, default=3, help="whole-process import timings per side")
    ap.add_argument("--compare", metavar="PYTHON", help="interpreter with upstream verl installed")
    ap.add_argument("--json", help="write the raw numbers here")
    ap.add_argument("--only", nargs="*", help="time only ops whose name contains one of these strings")
    ap.add_argument(
        "--threads", type=int, default=0, help="torch threads on both sides (0: the CPUs we may use)"
    )
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.worker:
        worker(args.batch, args.seqlen, args.threads)
        return

    pythons = {"ours": sys.executable}
    if args.compare:
        pythons["upstream"] = args.compare
    sides = {name: Side(py, args.batch, args.seqlen, args.threads) for name, py in pythons.items()}
    floors = {op for op in sides["ours"].info["ops"] if op.startswith("floor: ")}
    ops = [
        op
        for op in sides["ours"].info["ops"]
        if not op.startswith("floor: ") and (not args.only or any(o in op for o in args.only))
    ]
    ops += [f"floor: {op}" for op in ops if f"floor: {op}" in floors]
    times = alternate(sides, ops, args.rounds, args.reps)
    for side in sides.values():
        side.close()
    for stmt in ("import verl", "from verl import DataProto") if args.import_reps else ():
        op = f"process: python -c '{stmt}'"
        for name in sides:
            times[name][op] = []
        for _ in range(args.import_reps):
            for name, py in pythons.items():
                times[name][op].append(import_time(py, stmt))

    med = {name: {op: statistics.median(ts) for op, ts in per.items()} for name, per in times.items()}
    ours = sides["ours"].info
    print(
        f"# DataProto benchmark: B={args.batch} L={args.seqlen}, tensor payload {ours['tensor_bytes'] / 2**20:.1f} MiB; "
        f"per op: median over {args.rounds} alternating rounds of the median of {args.reps} reps; "
        f"{os.cpu_count()} CPUs, loadavg {os.getloadavg()[0]:.2f}"
    )
    if args.compare:
        up = sides["upstream"].info
        print(
            f"# pickle size: ours {ours['pickle_bytes'] / 2**20:.2f} MiB, upstream {up['pickle_bytes'] / 2**20:.2f} MiB\n"
        )
        print(
            "| op | ours | upstream verl | ours / upstream (median of per-round ratios) "
            "| plain torch, our env | plain torch, upstream env |"
        )
        print("|---|---|---|---|---|---|")
        for op in times["ours"]:
            if op.startswith("floor: "):
                continue
            ratios = [a / b for a, b in zip(times["ours"][op], times["upstream"][op])]
            floor = f"floor: {op}"
            plain = (
                f"{_fmt(med['ours'][floor])} | {_fmt(med['upstream'][floor])}"
                if floor in med["ours"]
                else " | "
            )
            print(
                f"| {op} | {_fmt(med['ours'][op])} | {_fmt(med['upstream'][op])} | {statistics.median(ratios):.2f} "
                f"| {plain} |"
            )
    else:
        print(f"# pickle size: {ours['pickle_bytes'] / 2**20:.2f} MiB\n")
        print("| op | median |")
        print("|---|---|")
        for op, t in med["ours"].items():
            print(f"| {op} | {_fmt(t)} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "times": times, "median": med}, f, indent=2)


if __name__ == "__main__":
    main()
