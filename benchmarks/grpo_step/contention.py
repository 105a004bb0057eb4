"""How each GRPO step degrades when another training run shares the cores.

    uv run python benchmarks/grpo_step/contention.py --size s --new-tokens 16 --rounds 12 \
        [--trl-python /work/venv-trl/bin/python]

One process per implementation, as in ``cell.py``: ours (this process is the driver, its Ray cluster
started by ``main_ppo.ray_init_kwargs`` exactly as ``python -m verl.trainer.main_ppo`` starts it, so
the worker's thread count is the production rule's), the bare-PyTorch step server and TRL's. The
competing load is "another training run": ``bare.py`` training a model of the same size with torch's
default threads in a loop (``--compete-tokens`` new tokens per step), started once. Rounds alternate
quiet / loaded: the competitor is stopped (SIGSTOP) for the quiet rounds and resumed (SIGCONT) for
the loaded ones, so each pair of rounds sees the same machine otherwise. A round runs ours, then
bare, then TRL. The report gives each implementation's median step time in both states and the
median of the per-pair ratios loaded / quiet (how much the competitor slows it).

``--worker-threads N`` / ``--driver-threads N`` force the thread counts instead of the production
rule (0, the default): the diagnosis of what causes a collapse.

``--omp-wait-policy passive|active|default`` sets how the OpenMP threads of our worker, the bare step
and TRL wait at a barrier (``stepper.OMP_WAIT_POLICIES``; "default" is libgomp's own spin-then-sleep);
omitted, our worker follows verl's rule (PASSIVE, ``verl.utils.cpu_threads``) and bare/TRL keep
libgomp's default. The competitor always keeps libgomp's default, as another user's run would.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import assets  # noqa: E402
import ours  # noqa: E402  (sets RAY_ENABLE_UV_RUN_RUNTIME_ENV before Ray is imported)
from stepper import StepServer, apply_omp_wait_policy, omp_wait_env  # noqa: E402


def _loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def _ctx_switches(pid: int) -> tuple[int, int]:
    """Voluntary (the process waited: a sleep, a lock, a wake-up to come) and involuntary (it was
    preempted) context switches of all of ``pid``'s threads so far, from /proc."""
    vol = invol = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            status = (task / "status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("voluntary_ctxt_switches:"):
                vol += int(line.split()[1])
            elif line.startswith("nonvoluntary_ctxt_switches:"):
                invol += int(line.split()[1])
    return vol, invol


def _threads_cpu(pid: int) -> dict[int, tuple[str, float]]:
    """Thread id -> (thread name, CPU seconds user + system so far) of process ``pid``, from /proc."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except OSError:  # the thread ended
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        out[int(task.name)] = (name, (int(fields[11]) + int(fields[12])) / tick)
    return out


def _proc_omp_env(pid: int) -> dict[str, str]:
    """The libgomp wait variables in process ``pid``'s environment (as it started)."""
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    pairs = dict(item.decode(errors="replace").split("=", 1) for item in raw if b"=" in item)
    return {k: pairs[k] for k in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT") if k in pairs}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="s", choices=sorted(assets.SIZES))
    ap.add_argument("--new-tokens", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=12, help="measured rounds (half quiet, half loaded)")
    ap.add_argument("--warmup", type=int, default=2, help="quiet rounds left out first")
    ap.add_argument("--trl-python", default=None)
    ap.add_argument("--compete-tokens", type=int, default=64, help="new tokens per step of the competitor")
    ap.add_argument("--worker-threads", type=int, default=0, help="force OMP_NUM_THREADS of our worker")
    ap.add_argument("--driver-threads", type=int, default=0, help="force torch threads of our driver")
    ap.add_argument(
        "--omp-wait-policy",
        default=None,
        help="OpenMP wait policy of ours' worker, bare and TRL (omitted: verl's rule for ours, libgomp's for the others)",
    )
    ap.add_argument("--after-overrides", nargs="*", default=[])
    ap.add_argument("--assets", default="/tmp/grpo_step_assets")
    ap.add_argument("--out", default="/tmp/grpo_contention")
    args = ap.parse_args()
    if args.rounds < 2 or args.rounds % 2:
        raise SystemExit(f"--rounds {args.rounds}: need an even number >= 2 (quiet/loaded pairs)")
    competitor_env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    apply_omp_wait_policy(args.omp_wait_policy)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    model = assets.ensure_model(args.size, Path(args.assets))
    total = args.warmup + args.rounds
    import ray
    from verl.trainer.config import load_config, validate_config
    from verl.trainer.main_ppo import build_trainer, ray_init_kwargs

    cfg = load_config(
        ours.overrides(model, args.new_tokens, total, out / "ours_out", after_overrides=args.after_overrides)
    )
    validate_config(cfg)
    kwargs = ray_init_kwargs(cfg)
    if args.worker_threads:
        kwargs["runtime_env"]["env_vars"]["OMP_NUM_THREADS"] = str(args.worker_threads)
    for attempt in range(8):  # on a loaded machine Ray's raylet may miss its 30 s start-up window
        try:
            ray.init(address="local", configure_logging=False, log_to_driver=False, **kwargs)
            break
        except Exception as e:  # noqa: BLE001 (Ray raises a bare Exception for this)
            if "timed out during startup" not in str(e) or attempt == 7:
                raise
            ray.shutdown()
    servers: dict[str, StepServer] = {}
    competitor = None
    try:
        base = ["--model", str(model), "--new-tokens", str(args.new_tokens)]
        servers = {
            "bare": StepServer(
                "bare", [sys.executable, str(HERE / "bare.py"), "--serve", *base], out / "bare.log"
            )
        }
        if args.trl_python:
            servers["trl"] = StepServer(
                "trl",
                [args.trl_python, str(HERE / "trl_driver.py"), *base, "--workdir", str(out / "trl_out")],
                out / "trl.log",
            )
        competitor = subprocess.Popen(
            [
                sys.executable,
                str(HERE / "bare.py"),
                "--model",
                str(model),
                "--new-tokens",
                str(args.compete_tokens),
                "--seed",
                "1",
                "--steps",
                "1000000",
            ],
            stdout=subprocess.DEVNULL,
            stderr=open(out / "competitor.log", "w"),  # noqa: SIM115
            env=competitor_env,
        )
        os.kill(competitor.pid, signal.SIGSTOP)  # quiet until the first loaded round
        records: dict[str, list[dict]] = {"ours": [], **{name: [] for name in servers}}
        loads: list[str] = []

        def loaded(round_idx: int) -> bool:  # warm-up rounds quiet, then quiet, loaded, quiet, ...
            return round_idx >= args.warmup and (round_idx - args.warmup) % 2 == 1

        trainer = build_trainer(cfg, trainer_cls=ours.BenchTrainer)
        trainer.init_workers()
        if args.driver_threads:
            import torch

            torch.set_num_threads(args.driver_threads)
        workers = ours.worker_info(trainer)
        # cpu_s of our records: the driver's and its workers' CPU time (spinning shows up here)
        trainer.cpu_clock = ours.cpu_clock_of([w["pid"] for w in workers])
        worker_threads_cpu = [_threads_cpu(w["pid"]) for w in workers]
        worker_switches = [_ctx_switches(w["pid"]) for w in workers]
        import torch

        setup = {
            "driver_threads": torch.get_num_threads(),
            "worker_threads": [w["threads"] for w in workers],
            # what each process really got (read from /proc, not assumed from the flags)
            "omp_wait": {
                "worker": [_proc_omp_env(w["pid"]) for w in workers],
                **{name: _proc_omp_env(server.pid) for name, server in servers.items()},
                "competitor": _proc_omp_env(competitor.pid),
            },
            "driver_env": omp_wait_env(),
        }
        print(f"threads: {setup}", flush=True)

        def between_steps(step: int) -> None:
            i = step - 1
            for name, server in servers.items():
                records[name].append(server.step())
            records["ours"].append(trainer.recorder.records[-1])
            # which of the worker's threads used the CPU this round, by thread name (diagnosis)
            for w, before in zip(workers, worker_threads_cpu):
                now = _threads_cpu(w["pid"])
                by_name: dict[str, float] = {}
                for tid, (name, cpu) in now.items():
                    by_name[name] = by_name.get(name, 0.0) + cpu - before.get(tid, (name, 0.0))[1]
                records["ours"][-1].setdefault("worker_thread_cpu_s", []).append(
                    {k: round(v, 3) for k, v in sorted(by_name.items(), key=lambda kv: -kv[1]) if v > 0.005}
                )
                before.clear()
                before.update(now)
            for k, w in enumerate(workers):
                now_sw = _ctx_switches(w["pid"])
                records["ours"][-1].setdefault("worker_ctx_switches", []).append(
                    {
                        "voluntary": now_sw[0] - worker_switches[k][0],
                        "involuntary": now_sw[1] - worker_switches[k][1],
                    }
                )
                worker_switches[k] = now_sw
            loads.append(_loadavg())
            state = "loaded" if loaded(i) else "quiet"
            others = " ".join(f"{n} {records[n][-1]['step_s']:.3f}" for n in servers)
            print(
                f"round {i} {state}: ours {records['ours'][-1]['wall_s']:.3f} {others} (load {loads[-1]}); "
                f"ours cpu {records['ours'][-1]['cpu_s']:.2f} s, worker threads "
                f"{records['ours'][-1].get('worker_thread_cpu_s')}, switches "
                f"{records['ours'][-1].get('worker_ctx_switches')}",
                flush=True,
            )
            os.kill(competitor.pid, signal.SIGCONT if loaded(i + 1) else signal.SIGSTOP)
            if loaded(i + 1):
                time.sleep(0.5)  # the competitor is mid-step again before our next step starts

        trainer.between_steps = between_steps
        trainer.fit()
    finally:
        if competitor is not None:
            os.kill(competitor.pid, signal.SIGCONT)
            competitor.kill()
            competitor.wait()
        ray.shutdown()
        for server in servers.values():
            server.close()
    # every round's record: ours' include the trainer's per-stage timing_s/<stage> metrics
    report = {"args": vars(args), "setup": setup, "loadavg": loads, "rows": {}, "records": records}
    print(f"\n{args.size}/{args.new_tokens}: median s/step quiet, loaded, and median per-pair loaded/quiet")
    for name, recs in records.items():
        key = "wall_s" if name == "ours" else "step_s"
        times = [r[key] for r in recs[args.warmup :]]
        quiet, busy = times[0::2], times[1::2]
        ratio = statistics.median(b / q for q, b in zip(quiet, busy))
        row = {
            "quiet_s": statistics.median(quiet),
            "loaded_s": statistics.median(busy),
            "loaded_over_quiet": ratio,
            "quiet_all": quiet,
            "loaded_all": busy,
        }
        report["rows"][name] = row
        print(f"| {name} | {row['quiet_s']:.3f} | {row['loaded_s']:.3f} | {ratio:.2f} |")
    (out / "contention.json").write_text(json.dumps(report, indent=1))
    print(f"load averages per round: {loads}")


if __name__ == "__main__":
    main()
