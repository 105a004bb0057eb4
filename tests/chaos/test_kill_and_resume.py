"""Kill a worker for real and resume: the real trainer (Ray, 2 FSDP2 CPU workers, the native rollout,
a shaped rule reward) on a random-init xs Qwen2, 16 prompts = 4 steps per epoch, 6 steps in all,
a checkpoint every 2 steps, warmup + cosine LR (so a schedule that is not restored shows).

1. The reference: 6 uninterrupted steps.
2. The same run, with worker rank 1 SIGKILLed ~50 ms into ``update_actor`` of step 6 (its last checkpoint
   is step 4, the epoch boundary; step 5 was already logged): the driver fails at once with an error
   naming the role, rank, pid and step.
3. ``trainer.resume_mode=auto`` (new workers) continues from step 4: steps 5-6 re-run and every step's
   metrics in metrics.jsonl equal the reference's bit for bit; step 5 appears once.
4. Launched again: a non-zero exit that says there is nothing to train.
"""

import os
import signal
import threading
import time

import pytest

from .harness import rl_args, run_inprocess, train_rows

pytestmark = [pytest.mark.slow, pytest.mark.e2e]

TOTAL, KILL_STEP = 6, 6


def _killer_trainer(kill_step: int, record: dict):
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    class KillMidUpdate(RayPPOTrainer):
        """SIGKILLs worker rank 1 shortly after the driver sends it ``update_actor`` of ``kill_step``."""

        def _stage_update_actor(self, batch, metrics):
            if self.global_steps == kill_step:
                pid = self.actor_rollout_wg.worker_pids[1]

                def kill():
                    time.sleep(0.05)
                    record.update(pid=pid, killed_at=time.monotonic())
                    os.kill(pid, signal.SIGKILL)

                threading.Thread(target=kill, daemon=True).start()
            return super()._stage_update_actor(batch, metrics)

    return KillMidUpdate


def test_worker_sigkill_mid_update_then_auto_resume_matches_uninterrupted(
    ray_cluster, chaos_assets, tmp_path
):
    from verl.single_controller.ray import WorkerDiedError

    model, data = chaos_assets["model"], chaos_assets["data"]
    ref_dir, run_dir = tmp_path / "ref", tmp_path / "run"
    run_inprocess(rl_args(model, data, ref_dir, TOTAL, "trainer.save_freq=2"))
    expected = train_rows(ref_dir)
    assert sorted(expected) == [1, 2, 3, 4, 5, 6]
    assert expected[5]["training/epoch"] == 1 and expected[4]["training/epoch"] == 0
    lrs = [expected[s]["actor/lr"] for s in range(1, TOTAL + 1)]
    assert all(a != b for a, b in zip(lrs, lrs[1:])), lrs  # warmup + cosine: the LR moves every step
    assert any(r["critic/advantages/max"] > 0 for r in expected.values())  # the updates are not no-ops

    record: dict = {}
    args = rl_args(model, data, run_dir, TOTAL, "trainer.save_freq=2")
    with pytest.raises(WorkerDiedError) as err:
        run_inprocess(args, trainer_cls=_killer_trainer(KILL_STEP, record))
    seconds_to_fail = time.monotonic() - record["killed_at"]
    msg = str(err.value)
    for part in (
        f"training step {KILL_STEP}",
        "rank 1",
        f"pid {record['pid']}",
        "actor_rollout",
        "update_actor",
    ):
        assert part in msg, f"{part!r} not in the error: {msg}"
    print(
        f"\n[chaos] worker SIGKILL mid-update: driver failed {seconds_to_fail:.1f} s after the kill: {msg[:300]}"
    )
    assert (run_dir / "latest_checkpointed_iteration.txt").read_text() == "4"
    assert sorted(train_rows(run_dir)) == [1, 2, 3, 4, 5]  # step 5 logged, not checkpointed

    run_inprocess(args)  # trainer.resume_mode=auto (rl_args' default), new worker processes
    got = train_rows(run_dir)  # raises if a step was logged twice
    assert sorted(got) == [1, 2, 3, 4, 5, 6]
    for step in range(1, TOTAL + 1):  # bit-exact: same seed, CPU, same worker count
        assert got[step] == expected[step], (
            f"step {step}: resumed {got[step]} != uninterrupted {expected[step]}"
        )

    from verl.trainer.main_ppo import main

    with pytest.raises(SystemExit) as done:
        main(args)
    assert done.value.code != 0 and "nothing to train" in str(done.value.code)
    assert "step 6" in str(done.value.code)
