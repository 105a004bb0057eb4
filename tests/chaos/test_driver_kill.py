"""``kill -9`` of the driver (``python -m verl.trainer.main_ppo``, which started its own Ray) mid-training:
the Ray processes it started, its two workers among them, must not linger, and the last checkpoint stays
complete and loadable."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from .harness import rl_args

pytestmark = [pytest.mark.slow, pytest.mark.e2e]


def _train_steps_logged(out) -> int:
    path = out / "metrics.jsonl"
    if not path.exists():
        return 0
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:  # a line being written
            pass
    return sum("training/global_step" in r for r in rows)


def test_driver_sigkill_leaves_no_ray_processes(chaos_assets, tmp_path):
    import psutil
    from verl.utils.checkpoint import find_latest_ckpt_path, load_trainer_state

    out = tmp_path / "run"
    args = rl_args(
        chaos_assets["model"],
        chaos_assets["data"],
        out,
        200,
        "trainer.save_freq=2",
        "ray_kwargs.ray_init.num_cpus=2",
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_ADDRESS")}  # its own Ray, as a user's
    env["RAY_ENABLE_UV_RUN_RUNTIME_ENV"] = "0"
    log = open(tmp_path / "driver.log", "w")
    driver = subprocess.Popen(
        [sys.executable, "-m", "verl.trainer.main_ppo", *args], env=env, stdout=log, stderr=subprocess.STDOUT
    )
    try:
        deadline = time.monotonic() + 600
        while _train_steps_logged(out) < 3:  # a checkpoint at step 2, now mid-step
            assert driver.poll() is None, (tmp_path / "driver.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "the driver logged no 3 steps in 600 s"
            time.sleep(0.2)
        started = psutil.Process(driver.pid).children(recursive=True)
        names = sorted({p.name() for p in started})
        assert len(started) >= 3, names  # Ray's own processes and the two workers
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait()
        killed_at = time.monotonic()
        _, alive = psutil.wait_procs(started, timeout=30)
        lingering = [
            f"{p.pid} {p.name()}" for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE
        ]
        print(
            f"\n[chaos] driver SIGKILL: {len(started)} processes ({', '.join(names)}) gone "
            f"{time.monotonic() - killed_at:.1f} s after the kill; lingering: {lingering}"
        )
        assert not lingering, f"processes the killed driver started still run: {lingering}"
    finally:
        if driver.poll() is None:
            driver.kill()
        log.close()
    latest = find_latest_ckpt_path(str(out))
    step = load_trainer_state(latest)["global_step"]
    assert step >= 2 and (out / f"global_step_{step}" / "actor" / "checkpoint_meta.json").is_file()
