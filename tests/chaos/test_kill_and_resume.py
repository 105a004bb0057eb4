"""``kill -9`` of a worker inside generate, update and save, then ``trainer.resume_mode=auto``.

The real trainer (Ray, 2 FSDP2 CPU workers, the native rollout, a shaped rule reward) on a random-init xs
Qwen2, 16 prompts = 4 steps per epoch, 6 steps, a checkpoint every 2 steps, warmup + cosine LR (so a
schedule that is not restored shows). Worker rank 1 holds inside the phase (``phases.py``: the native
rollout's first decode step, the actor's second forward in ``update_actor``, mid-way through writing its
DCP shard) and writes a marker; a thread SIGKILLs the pid the marker names. Then:

1. the driver fails with ``WorkerDiedError`` naming the step, rank, pid, role and method, seconds after
   the kill (asserted under 120 s: Ray's own time-outs are minutes, gloo's 30 min);
2. every ``global_step_*`` left is complete and the tracker names the last one committed before the kill
   (the interrupted save of step 4 left nothing under a ``global_step_`` name);
3. the relaunch resumes from it and every step's metrics in metrics.jsonl equal the uninterrupted run's
   bit for bit (CPU, same seed and worker count), each step logged once.
"""

import os
import signal
import threading
import time

import pytest

from .conftest import KILL_RUN_SAVE_FREQ, KILL_RUN_STEPS
from .harness import rl_args, run_inprocess, train_rows
from .phases import marker_path, wait_for_marker, with_phase_worker

pytestmark = [pytest.mark.slow, pytest.mark.e2e]

# phase, step held, checkpoint left as latest, steps logged by the killed run, the worker method named
CASES = [
    ("generate", 3, 2, [1, 2], "generate_sequences"),
    ("update", 6, 4, [1, 2, 3, 4, 5], "update_actor"),  # the epoch boundary (4) is the resume point
    ("save", 4, 2, [1, 2, 3], "save_checkpoint"),  # step 4 is logged after its save: never here
]


def assert_only_complete_checkpoints(run_dir, latest: int) -> None:
    """Every ``global_step_*`` dir holds what a load reads; the tracker names ``latest``."""
    from verl.utils.checkpoint import find_latest_ckpt_path, list_checkpoints

    steps = [s for s, _ in list_checkpoints(str(run_dir))]
    assert steps == list(range(KILL_RUN_SAVE_FREQ, latest + 1, KILL_RUN_SAVE_FREQ)), steps
    for s in steps:
        d = run_dir / f"global_step_{s}"
        for f in ("trainer_state.pt", "actor/checkpoint_meta.json", "actor/model_optim/.metadata"):
            assert (d / f).is_file(), f"{d} looks like a checkpoint but has no {f}"
    assert (run_dir / "latest_checkpointed_iteration.txt").read_text() == str(latest)
    assert find_latest_ckpt_path(str(run_dir)) == str(run_dir / f"global_step_{latest}")


def _kill_when_marked(marker, record: dict) -> threading.Thread:
    def kill():
        try:
            record.update(wait_for_marker(marker, timeout_s=900))
        except Exception as e:  # the run failed or finished first: the test's assertions say so
            record["error"] = repr(e)
            return
        record["killed_at"] = time.monotonic()
        os.kill(record["pid"], signal.SIGKILL)

    t = threading.Thread(target=kill, daemon=True)
    t.start()
    return t


@pytest.mark.parametrize("phase,step,latest,logged,method", CASES, ids=[c[0] for c in CASES])
def test_worker_sigkill_in_phase_then_auto_resume_matches_uninterrupted(
    ray_cluster, chaos_assets, reference_rows, tmp_path, phase, step, latest, logged, method
):
    from verl.single_controller.ray import WorkerDiedError
    from verl.trainer.config import load_config
    from verl.trainer.main_ppo import build_role_worker_mapping

    expected = reference_rows
    run_dir = tmp_path / "run"
    args = rl_args(
        chaos_assets["model"],
        chaos_assets["data"],
        run_dir,
        KILL_RUN_STEPS,
        f"trainer.save_freq={KILL_RUN_SAVE_FREQ}",
    )
    mapping = with_phase_worker(build_role_worker_mapping(load_config(args)), phase, 1, step, str(tmp_path))
    record: dict = {}
    killer = _kill_when_marked(marker_path(tmp_path, phase, step, 1), record)
    with pytest.raises(WorkerDiedError) as err:
        run_inprocess(args, role_worker_mapping=mapping)
    seconds_to_fail = time.monotonic() - record["killed_at"]
    killer.join(timeout=5)
    msg = str(err.value)
    for part in (f"training step {step}", "rank 1", f"pid {record['pid']}", "actor_rollout", method):
        assert part in msg, f"{part!r} not in the error: {msg}"
    print(
        f"\n[chaos] worker SIGKILL in {phase} ({record['detail']}): driver failed {seconds_to_fail:.1f} s "
        f"after the kill: {msg[:300]}"
    )
    assert seconds_to_fail < 120, f"the driver took {seconds_to_fail:.0f} s to notice the dead worker"
    assert_only_complete_checkpoints(run_dir, latest)
    assert not [p for p in os.listdir(run_dir) if p.startswith(".tmp_")]  # the failed save cleaned up
    assert sorted(train_rows(run_dir)) == logged

    run_inprocess(args)  # trainer.resume_mode=auto (rl_args' default), new worker processes
    got = train_rows(run_dir)  # raises if a step was logged twice
    assert sorted(got) == list(range(1, KILL_RUN_STEPS + 1))
    for s in range(1, KILL_RUN_STEPS + 1):  # bit-exact: same seed, CPU, same worker count
        assert got[s] == expected[s], f"step {s}: resumed {got[s]} != uninterrupted {expected[s]}"

    if phase == "update":
        assert expected[5]["training/epoch"] == 1 and expected[4]["training/epoch"] == 0
        lrs = [expected[s]["actor/lr"] for s in range(1, KILL_RUN_STEPS + 1)]
        assert all(a != b for a, b in zip(lrs, lrs[1:])), lrs  # warmup + cosine: the LR moves every step
        assert any(r["critic/advantages/max"] > 0 for r in expected.values())  # the updates are not no-ops
        from verl.trainer.main_ppo import main

        with pytest.raises(SystemExit) as done:  # launched once more: nothing to train, non-zero
            main(args)
        assert done.value.code != 0 and "nothing to train" in str(done.value.code)
        assert f"step {KILL_RUN_STEPS}" in str(done.value.code)
