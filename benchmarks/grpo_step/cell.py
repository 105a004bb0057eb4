"""One benchmark cell (one model size x one response length), in its own process.

Ours runs in this process (the driver) and its Ray worker; ours_before (the trainer as of an older
commit, ``before.py``), the bare and the TRL steps run in step-server subprocesses. After each of
our steps the trainer's tracking hook runs one ours_before step, one bare step, then one TRL step:
A, B, C, D, A, B, C, D ... so slow phases of a shared machine hit all of them alike.

Memory, two ways:
- per-process peaks summed: each process's peak resident set (``ru_maxrss`` for the servers and
  this driver, ``VmHWM`` from ``/proc`` for Ray workers); ours = driver + actor worker, ours_before =
  its driver + its actor worker. This counts the shared-library pages both processes map twice.
- union peak (``memory.UnionSampler``): a thread samples every ~50 ms the union resident memory of
  each implementation's processes (private pages summed, shared file pages once per file) and keeps
  its peak over the measured rounds.
The Ray daemons (GCS, raylet, idle workers) of each Ray cluster are reported apart, as their current
RSS at the end of the cell.

Precision (``dtype``): ``fp32``, or ``bf16`` compute over fp32 weights for every side: ours
``fsdp_config.mixed_precision.param_dtype=bf16`` (what ``auto`` picks on a processor with native bf16
units), bare and TRL bf16 autocast. ``ours_compile``: ``actor.use_torch_compile`` of ours (true, false,
or null: the trainer's own decision, which for a run this short is off).

Writes a JSON file with every step's record of all of them, the processor and each side's torch build.
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

import before  # noqa: E402
import ours  # noqa: E402  (sets RAY_ENABLE_UV_RUN_RUNTIME_ENV before Ray is imported)
from memory import UnionSampler  # noqa: E402
from stepper import StepServer  # noqa: E402


def _vm_hwm_mib(pid: int) -> float:
    """Peak RSS of a live process (``VmHWM`` in ``/proc/<pid>/status``), MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024.0
    raise RuntimeError(f"/proc/{pid}/status has no VmHWM line")


def _descendants(pid: int) -> set[int]:
    import psutil

    return {p.pid for p in psutil.Process(pid).children(recursive=True)}


def _other_descendants_mib(exclude: set[int], root: int | None = None) -> tuple[float, int]:
    """Current RSS (MiB) and count of ``root``'s (default: this process's) descendants outside
    ``exclude`` (Ray's daemons)."""
    import psutil

    total, count = 0.0, 0
    for p in psutil.Process(root).children(recursive=True):
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
    before_worktree: Path | None = None,
    after_overrides: list[str] | None = None,
    mem_period_s: float = 0.05,
    micro_batch: int = 64,
    dtype: str = "fp32",
    ours_compile: str = "true",
) -> dict:
    """Time ``warmup + steps`` alternating rounds; write and return the raw records."""
    out_json.parent.mkdir(parents=True, exist_ok=True)
    tag = out_json.stem
    # rows per training forward/backward, the same for every implementation (assets.micro_batch_rows)
    after_overrides = [
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={micro_batch}",
        f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={micro_batch}",
        f"actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype={dtype}",
        f"actor_rollout_ref.actor.use_torch_compile={ours_compile}",
        *(after_overrides or []),
    ]
    servers: dict[str, StepServer] = {}
    if before_worktree is not None:  # started first: its Ray cluster's start-up is the slowest
        servers["ours_before"] = StepServer(
            "ours_before",
            [
                sys.executable,
                str(HERE / "before.py"),
                "--serve",
                "--worktree",
                str(before_worktree),
                "--model",
                str(model_dir),
                "--new-tokens",
                str(new_tokens),
                "--steps",
                str(warmup + steps),
                "--worker-threads",
                str(worker_threads),
                "--out-dir",
                str(out_json.with_name(f"{tag}_ours_before_out")),
            ],
            out_json.with_name(f"{tag}_ours_before.log"),
            env=before.server_env(before_worktree),
        )
    base = [
        "--model",
        str(model_dir),
        "--new-tokens",
        str(new_tokens),
        "--lr",
        str(lr),
        "--threads",
        str(threads),
        "--micro-batch",
        str(micro_batch),
        "--dtype",
        dtype,
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
    sampler = UnionSampler(period_s=mem_period_s)

    def between_steps(step: int) -> None:
        for name, server in servers.items():  # ours_before, bare, then TRL
            records[name].append(server.step())
        ours_s = trainer.recorder.records[-1]["wall_s"]
        others = " ".join(f"{name} {records[name][-1]['step_s']:.3f}" for name in servers)
        print(f"round {step}: ours {ours_s:.3f} {others} (s/step)", flush=True)
        if len(trainer.recorder.records) == warmup:  # the measured rounds start now
            sampler.measure()

    t0 = time.perf_counter()
    # trainer.worker_backend=local: the worker is this process (no Ray cluster, no worker pids)
    in_process = "trainer.worker_backend=local" in after_overrides
    if in_process:
        import torch

        torch.set_num_threads(worker_threads)
    else:
        ours.start_ray(worker_threads)
    try:
        trainer = ours.build(
            model_dir,
            new_tokens,
            warmup + steps,
            out_json.with_name(f"{tag}_ours_out"),
            variant="after",
            after_overrides=after_overrides,
        )
        workers = [] if in_process else ours.worker_info(trainer)
        sampler.add("ours", [os.getpid()] + [w["pid"] for w in workers])
        for name, server in servers.items():
            extra = [w["pid"] for w in server.ready["workers"]] if name == "ours_before" else []
            sampler.add(name, [server.pid, *extra])
        sampler.start()
        if warmup == 0:
            sampler.measure()
        trainer.between_steps = between_steps
        trainer.cpu_clock = ours.cpu_clock_of([w["pid"] for w in workers])  # driver + actor worker
        trainer.fit()
        sampler.stop()
        records["ours"] = trainer.recorder.records
        worker_peak = sum(_vm_hwm_mib(w["pid"]) for w in workers)
        server_trees = {s.pid for s in servers.values()}.union(
            *(_descendants(s.pid) for s in servers.values())
        )
        exclude = {w["pid"] for w in workers} | server_trees
        daemons_mib, n_daemons = _other_descendants_mib(exclude)
        before_rss = None
        if "ours_before" in servers:
            srv = servers["ours_before"]
            before_workers = {w["pid"] for w in srv.ready["workers"]}
            b_mib, b_n = _other_descendants_mib(before_workers, root=srv.pid)
            before_rss = {
                "driver_peak_mib": _vm_hwm_mib(srv.pid),
                "worker_peak_mib": sum(_vm_hwm_mib(p) for p in before_workers),
                "ray_daemons_mib": b_mib,
                "ray_daemon_processes": b_n,
            }
    finally:
        sampler.stop()
        import ray

        ray.shutdown()
        for server in servers.values():
            server.close()
    driver_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    import machine

    builds = {"ours": workers[0]["torch_build"] if workers else machine.torch_build()}
    builds.update({name: s.ready.get("torch_build") for name, s in servers.items()})
    result = {
        "model_dir": str(model_dir),
        "new_tokens": new_tokens,
        "micro_batch": micro_batch,
        "dtype": dtype,
        "ours_compile": ours_compile,
        "processor": machine.processor(),
        "torch_builds": builds,
        "steps": steps,
        "warmup": warmup,
        "wall_s": time.perf_counter() - t0,
        "ready": {name: s.ready for name, s in servers.items()},
        "ours_workers": workers,
        "after_overrides": after_overrides,
        "before": {"worktree": str(before_worktree), "commit": servers["ours_before"].ready["commit"]}
        if "ours_before" in servers
        else None,
        "ours_rss": {
            "driver_peak_mib": driver_peak,
            "worker_peak_mib": worker_peak,
            "ray_daemons_mib": daemons_mib,
            "ray_daemon_processes": n_daemons,
        },
        "ours_before_rss": before_rss,
        "union_rss": sampler.result(),
        "union_rss_errors": sampler.errors[:20],
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
    ap.add_argument("--before-worktree", default=None, help="a worktree of the old commit (before.py)")
    ap.add_argument("--after-overrides", nargs="*", default=[], help="key=value for our (after) config")
    ap.add_argument(
        "--micro-batch", type=int, default=64, help="rows per training forward/backward, all impls"
    )
    ap.add_argument("--mem-period", type=float, default=0.05, help="union-memory sampling period, s")
    ap.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"], help="compute dtype of every side")
    ap.add_argument(
        "--ours-compile", default="true", choices=["true", "false", "null"], help="actor.use_torch_compile of ours"
    )
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
        before_worktree=Path(args.before_worktree) if args.before_worktree else None,
        after_overrides=args.after_overrides,
        mem_period_s=args.mem_period,
        micro_batch=args.micro_batch,
        dtype=args.dtype,
        ours_compile=args.ours_compile,
    )


if __name__ == "__main__":
    main()
