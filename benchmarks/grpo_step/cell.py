"""One benchmark cell (one model size x one response length), in its own process.

Ours runs in this process (the driver) and its Ray worker; the bare and TRL steps run in step-server
subprocesses. After each of our steps the trainer's tracking hook runs one bare step, then one TRL
step: A, B, C, A, B, C ... so slow phases of a shared machine hit all three alike.

Memory: each process's peak resident set (``ru_maxrss`` for the bare/TRL servers and this driver,
``VmHWM`` from ``/proc`` for the Ray worker). Ours = driver + actor worker; the Ray daemons (GCS,
raylet, idle workers) are reported apart, as their current RSS at the end of the cell.

Writes a JSON file with every step's record of all three.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import ours  # noqa: E402  (sets RAY_ENABLE_UV_RUN_RUNTIME_ENV before Ray is imported)
from stepper import StepServer  # noqa: E402


def _vm_hwm_mib(pid: int) -> float:
    """Peak RSS of a live process (``VmHWM`` in ``/proc/<pid>/status``), MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024.0
    raise RuntimeError(f"/proc/{pid}/status has no VmHWM line")


def _other_descendants_mib(exclude: set[int]) -> tuple[float, int]:
    """Current RSS (MiB) and count of this process's descendants outside ``exclude`` (Ray's daemons)."""
    import psutil

    total, count = 0.0, 0
    for p in psutil.Process().children(recursive=True):
        if p.pid in exclude:
            continue
        try:
            total += p.memory_info().rss / 2**20
            count += 1
        except psutil.NoSuchProcess:
            pass
    return total, count


def run_cell(
    model_dir: Path,
    new_tokens: int,
    steps: int,
    warmup: int,
    out_json: Path,
    trl_python: str | None,
    worker_threads: int,
    threads: int,
    lr: float = 1e-3,
) -> dict:
    """Time ``warmup + steps`` alternating rounds; write and return the raw records."""
    out_json.parent.mkdir(parents=True, exist_ok=True)
    tag = out_json.stem
    servers: dict[str, StepServer] = {}
    base = [
        "--model",
        str(model_dir),
        "--new-tokens",
        str(new_tokens),
        "--lr",
        str(lr),
        "--threads",
        str(threads),
    ]
    servers["bare"] = StepServer(
        "bare",
        [sys.executable, str(HERE / "bare.py"), "--serve", *base],
        out_json.with_name(f"{tag}_bare.log"),
    )
    if trl_python:
        servers["trl"] = StepServer(
            "trl",
            [
                trl_python,
                str(HERE / "trl_driver.py"),
                *base,
                "--workdir",
                str(out_json.with_name(f"{tag}_trl_out")),
            ],
            out_json.with_name(f"{tag}_trl.log"),
        )
    records: dict[str, list[dict]] = {name: [] for name in servers}

    def between_steps(step: int) -> None:
        for name, server in servers.items():  # bare, then TRL
            records[name].append(server.step())
        ours_s = trainer.recorder.records[-1]["wall_s"]
        others = " ".join(f"{name} {records[name][-1]['step_s']:.3f}" for name in servers)
        print(f"round {step}: ours {ours_s:.3f} {others} (s/step)", flush=True)

    t0 = time.perf_counter()
    ours.start_ray(worker_threads)
    try:
        trainer = ours.build(model_dir, new_tokens, warmup + steps, out_json.with_name(f"{tag}_ours_out"))
        workers = ours.worker_info(trainer)
        trainer.between_steps = between_steps
        trainer.cpu_clock = ours.cpu_clock_of([w["pid"] for w in workers])  # driver + actor worker
        trainer.fit()
        records["ours"] = trainer.recorder.records
        worker_peak = sum(_vm_hwm_mib(w["pid"]) for w in workers)
        exclude = {w["pid"] for w in workers} | {s.pid for s in servers.values()}
        daemons_mib, n_daemons = _other_descendants_mib(exclude)
    finally:
        import ray

        ray.shutdown()
        for server in servers.values():
            server.close()
    driver_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    result = {
        "model_dir": str(model_dir),
        "new_tokens": new_tokens,
        "steps": steps,
        "warmup": warmup,
        "wall_s": time.perf_counter() - t0,
        "ready": {name: s.ready for name, s in servers.items()},
        "ours_workers": workers,
        "ours_rss": {
            "driver_peak_mib": driver_peak,
            "worker_peak_mib": worker_peak,
            "ray_daemons_mib": daemons_mib,
            "ray_daemon_processes": n_daemons,
        },
        "records": records,
    }
    out_json.write_text(json.dumps(result, indent=1))
    return result


def main() -> None:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--new-tokens", type=int, required=True)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--out-json", required=True)
    ap.add_argument("--trl-python", default=None)
    ap.add_argument("--worker-threads", type=int, default=2)
    ap.add_argument("--threads", type=int, default=0)
    args = ap.parse_args()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    run_cell(
        Path(args.model),
        args.new_tokens,
        args.steps,
        args.warmup,
        Path(args.out_json),
        args.trl_python,
        args.worker_threads,
        args.threads,
    )


if __name__ == "__main__":
    main()
