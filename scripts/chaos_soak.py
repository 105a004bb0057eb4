"""Soak test (not in CI): the default pipeline's GRPO run, with checkpoints every few steps, while a random
Ray worker is SIGKILLed every few minutes; each time the driver fails, it is relaunched with
``trainer.resume_mode=auto``. At the end: completed steps == requested and no step counted twice in
metrics.jsonl (and the number of kills, relaunches and seconds each failure took to surface).

    uv run python scripts/chaos_soak.py --out /tmp/soak --steps 2000 --kill-every 180  # ~30+ min on 2 cores
    uv run python scripts/chaos_soak.py --out /tmp/soak --steps 12 --kill-every 40     # a quick look

The GRPO run starts from the random-init tiny model (no SFT warm start): the soak is about surviving
kills, not about the reward.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path


def _worker_pids(driver_pid: int) -> list[int]:
    import psutil

    try:
        procs = psutil.Process(driver_pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    out = []
    for p in procs:
        try:
            if "FusedWorker" in " ".join(p.cmdline()[:1]):  # Ray's process title; name() is cut to 15 chars
                out.append(p.pid)
        except psutil.Error:
            pass
    return out


def _killer(driver: subprocess.Popen, every: float, rng: random.Random, log: list) -> None:
    """Sleep a random 0.5..1.5 x ``every`` seconds, then SIGKILL one random worker of ``driver``."""
    time.sleep(rng.uniform(0.5, 1.5) * every)
    pids = _worker_pids(driver.pid)
    while not pids and driver.poll() is None:  # still starting up: kill once the workers exist
        time.sleep(1.0)
        pids = _worker_pids(driver.pid)
    if driver.poll() is None and pids:
        pid = rng.choice(pids)
        os.kill(pid, signal.SIGKILL)
        log.append({"pid": pid, "at": time.monotonic()})
        print(f"[soak] SIGKILL worker pid {pid}", flush=True)


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--save-freq", type=int, default=3)
    p.add_argument("--kill-every", type=float, default=180.0, help="mean seconds between worker kills")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-launches", type=int, default=100)
    args = p.parse_args(argv)
    os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
    from verl.trainer.demo import build_model, rl_args, write_data

    out = Path(args.out).absolute()
    out.mkdir(parents=True, exist_ok=True)
    data, model = write_data(out / "data"), build_model(out / "model")
    run_dir = out / "rl"
    cmd = [
        sys.executable,
        "-m",
        "verl.trainer.main_ppo",
        *rl_args(model, data, run_dir, args.steps, args.workers),
        "trainer.resume_mode=auto",
        f"trainer.save_freq={args.save_freq}",
        "trainer.progress_bar=false",
        "trainer.val_before_train=false",
        "trainer.test_freq=-1",
        "trainer.logger=[console,jsonl]",
    ]
    rng, kills, launches, failures, startup_failures = random.Random(args.seed), [], 0, [], 0
    start = time.monotonic()
    while launches < args.max_launches:
        launches += 1
        driver = subprocess.Popen(cmd)
        threading.Thread(target=_killer, args=(driver, args.kill_every, rng, kills), daemon=True).start()
        rc = driver.wait()
        if rc == 0:
            for k in kills:  # a kill that raced the end of training hit a worker already shutting down
                k.setdefault("failed_after_s", "driver finished")
            break
        killed = [k for k in kills if "failed_after_s" not in k]
        if not killed:
            # Not our kill: tolerated only as a start-up failure (e.g. Ray's node timing out on an overloaded
            # machine), a few times in a row; anything else is a finding.
            startup_failures += 1
            if startup_failures > 3:
                raise SystemExit(f"the driver exited {rc} without a kill, {startup_failures} times in a row")
            print(
                f"[soak] driver exited {rc} without a kill (start-up failure {startup_failures}); relaunching"
            )
            continue
        startup_failures = 0
        killed[-1]["failed_after_s"] = round(time.monotonic() - killed[-1]["at"], 2)
        failures.append(rc)
        print(
            f"[soak] driver exited {rc} {killed[-1]['failed_after_s']} s after the kill; relaunching",
            flush=True,
        )
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    steps = [r["step"] for r in rows if "training/global_step" in r]
    summary = {
        "requested_steps": args.steps,
        "completed_steps": len(set(steps)),
        "logged_step_rows": len(steps),
        "steps_counted_twice": sorted({s for s in steps if steps.count(s) > 1}),
        "kills": len(kills),
        "launches": launches,
        "seconds_to_fail": [k.get("failed_after_s") for k in kills],
        "minutes": round((time.monotonic() - start) / 60, 1),
    }
    print(json.dumps(summary, indent=2), flush=True)
    (out / "soak_summary.json").write_text(json.dumps(summary, indent=2))
    assert summary["completed_steps"] == args.steps and sorted(set(steps)) == list(
        range(1, args.steps + 1)
    ), summary
    assert not summary["steps_counted_twice"], summary
    return summary


if __name__ == "__main__":
    main()
