"""Soak test (not in CI): the default pipeline's GRPO run with checkpoints every few steps, killed over and
over *inside* training and relaunched with ``trainer.resume_mode=auto`` each time.

Each launch picks a target in turn: worker generate, worker update, worker save, driver mid-step, driver
mid-save; a random worker rank; and a random step within the next two checkpoints. The driver is
``tests/chaos/phase_driver.py`` (``main_ppo``'s ``run_ppo`` with the actor worker held inside that phase of
that step, ``tests/chaos/phases.py``): once the held worker's marker file appears, the kill lands inside
the phase for certain, and the script SIGKILLs the worker or the driver. After every kill it checks that
every ``global_step_*`` dir is complete and the tracker names the newest one, and for a driver kill that
none of the driver's processes lingers. Every relaunch must print ``resumed from <the tracker's step>``.
Once ``--minutes`` have passed, the last launch runs to the end. At the end: completed steps == requested,
no step counted twice, and with ``--reference`` every step's metrics equal those of an uninterrupted run
(timing metrics aside).

    uv run python scripts/chaos_soak.py --out /tmp/soak --steps 400 --minutes 30 --reference
    uv run python scripts/chaos_soak.py --out /tmp/soak --steps 24 --minutes 15 --reference   # short

The GRPO run starts from the random-init tiny model (no SFT warm start): the soak is about surviving
kills, not about the reward.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DRIVER = ROOT / "tests" / "chaos" / "phase_driver.py"
TARGETS = [
    ("worker", "generate"),
    ("worker", "update"),
    ("worker", "save"),
    ("driver", "update"),
    ("driver", "save"),
]
_STARTUP_FAILURE = "node timed out during startup"
_VOLATILE = ("timing_s/", "timing_per_token_ms/", "perf/")


def _rows(run_dir: Path) -> list[dict]:
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def _train_rows(run_dir: Path) -> list[dict]:
    return [r for r in _rows(run_dir) if "training/global_step" in r]


def _check_checkpoints(run_dir: Path) -> tuple[int, list[str]]:
    """(the tracker's step, problems): a ``global_step_*`` dir missing a file a load reads is a problem."""
    from verl.utils.checkpoint import find_latest_ckpt_path, list_checkpoints, read_latest_step

    problems = []
    for step, path in list_checkpoints(str(run_dir)):
        for f in ("trainer_state.pt", "actor/checkpoint_meta.json", "actor/model_optim/.metadata"):
            if not (Path(path) / f).is_file():
                problems.append(f"global_step_{step} has no {f}")
    latest = read_latest_step(str(run_dir)) or 0
    found = find_latest_ckpt_path(str(run_dir))
    if latest and found != str(run_dir / f"global_step_{latest}"):
        problems.append(f"tracker says {latest}, find_latest_ckpt_path gives {found}")
    return latest, problems


def _launch(args: list[str], phase: str, rank: int, step: int, markers: Path, log: Path) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_ADDRESS")}
    env["RAY_ENABLE_UV_RUN_RUNTIME_ENV"] = "0"
    with open(log, "w") as f:
        cmd = [sys.executable, str(DRIVER), phase, str(rank), str(step), str(markers), *args]
        return subprocess.Popen(cmd, env=env, stdout=f, stderr=subprocess.STDOUT)


def _kill_in_phase(driver, target, marker: Path, event: dict) -> None:
    """Wait for the held worker's marker, SIGKILL the worker or the driver; record what happened."""
    import psutil

    sys.path.insert(0, str(DRIVER.parent))
    from phases import wait_for_marker

    try:
        held = wait_for_marker(marker, timeout_s=1800, alive=lambda: driver.poll() is None)
    except RuntimeError:  # the driver exited before the phase: the caller reads its log
        event["exited_before_phase"] = True
        return
    event["detail"] = held["detail"]
    if target == "worker":
        os.kill(held["pid"], signal.SIGKILL)
        killed_at = time.monotonic()
        try:
            driver.wait(timeout=600)
        except subprocess.TimeoutExpired:
            driver.kill()
            raise SystemExit(
                f"the driver did not fail within 600 s of the worker kill ({held['detail']})"
            ) from None
        event["seconds_to_fail"] = round(time.monotonic() - killed_at, 2)
        return
    started = psutil.Process(driver.pid).children(recursive=True)
    os.kill(driver.pid, signal.SIGKILL)
    driver.wait()
    _, alive = psutil.wait_procs(started, timeout=30)
    event["lingering"] = [p.pid for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    event["processes_started"] = len(started)


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--save-freq", type=int, default=3)
    p.add_argument("--minutes", type=float, default=30.0, help="keep killing until this much time has passed")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--first-target", type=int, default=0, help="index into the target cycle to start at")
    p.add_argument("--reference", action="store_true", help="also run uninterrupted and compare every metric")
    args = p.parse_args(argv)
    os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
    from verl.trainer.demo import build_model, rl_args, write_data

    out = Path(args.out).absolute()
    out.mkdir(parents=True, exist_ok=True)
    data, model = write_data(out / "data"), build_model(out / "model")
    run_dir, markers, logs = out / "rl", out / "markers", out / "logs"
    markers.mkdir(exist_ok=True)
    logs.mkdir(exist_ok=True)

    def train_args(d: Path) -> list[str]:
        return [
            *rl_args(model, data, d, args.steps, args.workers),
            "trainer.resume_mode=auto",
            f"trainer.save_freq={args.save_freq}",
            "trainer.progress_bar=false",
            "trainer.val_before_train=false",
            "trainer.test_freq=-1",
            "trainer.logger=[console,jsonl]",
            "ray_kwargs.ray_init.num_cpus=2",
        ]

    rng, events, start, launch, startup_failures = random.Random(args.seed), [], time.monotonic(), 0, 0
    while True:
        launch += 1
        latest, problems = _check_checkpoints(run_dir)
        if problems:
            raise SystemExit(f"half-written checkpoint after launch {launch - 1}: {problems}")
        killing = time.monotonic() - start < args.minutes * 60 and latest < args.steps - 1
        target, phase = (
            TARGETS[(args.first_target + sum(e["phase"] != "none" for e in events)) % len(TARGETS)]
            if killing
            else ("none", "none")
        )
        first = latest + 1
        if phase == "save":  # a step that saves: a multiple of save_freq, or the last
            saves = [s for s in range(first, args.steps + 1) if s % args.save_freq == 0 or s == args.steps]
            step = rng.choice(saves[:2])
        else:
            step = rng.randint(first, min(args.steps, latest + 2 * args.save_freq))
        rank = rng.randrange(args.workers)
        log = logs / f"launch_{launch}.log"
        event = {
            "launch": launch,
            "target": target,
            "phase": phase,
            "step": step,
            "rank": rank,
            "resumed_at": latest,
        }
        print(
            f"[soak] launch {launch}: tracker at {latest}; kill {target} in {phase} of step {step}",
            flush=True,
        )
        # each launch holds in its own marker folder: an earlier launch that targeted the same phase, step
        # and rank left its marker behind, and reading it would kill this launch before it starts
        launch_markers = markers / f"launch_{launch}"
        launch_markers.mkdir(exist_ok=True)
        driver = _launch(train_args(run_dir), phase, rank, step, launch_markers, log)
        if phase == "none":
            rc = driver.wait()
        else:
            _kill_in_phase(driver, target, launch_markers / f"{phase}_step{step}_rank{rank}.json", event)
            rc = driver.returncode
        text = log.read_text(errors="replace")
        if (phase == "none" and rc != 0 or event.get("exited_before_phase")) and _STARTUP_FAILURE in text:
            # Ray's node timing out on an overloaded machine, before any training: tolerated a few times
            startup_failures += 1
            print(
                f"[soak] launch {launch}: Ray did not start ({_STARTUP_FAILURE!r}); relaunching", flush=True
            )
            if startup_failures > 5:
                raise SystemExit(f"Ray failed to start {startup_failures} times in a row: see {log}")
            continue
        startup_failures = 0
        if event.get("exited_before_phase"):
            raise SystemExit(f"launch {launch} exited {rc} before reaching {phase} of step {step}: see {log}")
        m = re.search(r"resumed from \S+ at step (\d+)", text)
        event["resume_ok"] = (int(m.group(1)) if m else 0) == latest
        event["rc"] = rc
        events.append(event)
        print(f"[soak] {json.dumps(event)}", flush=True)
        if not event["resume_ok"]:
            raise SystemExit(f"launch {launch} did not resume from step {latest}: see {log}")
        if event.get("lingering"):
            raise SystemExit(f"launch {launch}: the killed driver's processes linger: {event['lingering']}")
        if phase == "none":
            if rc != 0:
                raise SystemExit(f"the final launch exited {rc}: see {log}")
            break
        if rc == 0:
            raise SystemExit(f"launch {launch} finished although it was killed: see {log}")

    steps = [r["step"] for r in _train_rows(run_dir)]
    kills = [e for e in events if e["phase"] != "none"]
    summary = {
        "requested_steps": args.steps,
        "completed_steps": len(set(steps)),
        "steps_counted_twice": sorted({s for s in steps if steps.count(s) > 1}),
        "kills": len(kills),
        "kills_per_target": {
            f"{t} {ph}": sum(e["target"] == t and e["phase"] == ph for e in kills) for t, ph in TARGETS
        },
        "launches": launch,
        "all_resumes_ok": all(e["resume_ok"] for e in events),
        "worker_kill_seconds_to_fail": [e["seconds_to_fail"] for e in kills if "seconds_to_fail" in e],
        "minutes": round((time.monotonic() - start) / 60, 1),
    }
    print(json.dumps(summary, indent=2), flush=True)
    if args.reference:
        ref_dir = out / "reference"
        ref_start = time.monotonic()
        for _ in range(5):  # Ray's start-up window missed on an overloaded machine: relaunch
            with open(logs / "reference.log", "w") as f:
                cmd = [sys.executable, str(DRIVER), "none", "0", "0", str(markers), *train_args(ref_dir)]
                rc = subprocess.call(cmd, stdout=f, stderr=subprocess.STDOUT)
            if rc == 0 or _STARTUP_FAILURE not in (logs / "reference.log").read_text(errors="replace"):
                break
        assert rc == 0, f"the uninterrupted run failed: see {logs / 'reference.log'}"
        ref = {r["step"]: r for r in _train_rows(ref_dir)}
        got = {r["step"]: r for r in _train_rows(run_dir)}
        differ = [
            (s, k)
            for s in ref
            for k in ref[s]
            if not k.startswith(_VOLATILE) and got.get(s, {}).get(k) != ref[s][k]
        ]
        summary["metrics_equal_uninterrupted"] = not differ and sorted(ref) == sorted(got)
        summary["differing_metrics"] = differ[:20]
        summary["reference_minutes"] = round((time.monotonic() - ref_start) / 60, 1)
    print(json.dumps(summary, indent=2), flush=True)
    (out / "soak_summary.json").write_text(json.dumps({"summary": summary, "events": events}, indent=2))
    assert summary["completed_steps"] == args.steps and sorted(set(steps)) == list(
        range(1, args.steps + 1)
    ), summary
    assert not summary["steps_counted_twice"], summary
    assert summary.get("metrics_equal_uninterrupted", True), summary
    return summary


if __name__ == "__main__":
    main()
