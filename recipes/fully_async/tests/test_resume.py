"""Checkpoint and resume of the whole asynchronous system.

What a checkpoint claims to keep: the trainer (core's actor checkpoint), the queued samples (trained
first after a resume, unchanged), the prompts drawn but not finished (the running wave's unfinished groups,
dropped on purpose and counted, and the unstarted ones: all generated again), and the data position (the
loader continues after the last prompt drawn). The end-to-end test kills a run with SIGKILL after a
checkpoint and resumes it; the unit test takes a checkpoint of the rollouter in the middle of a wave.
"""

import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from verl_recipe_fully_async.message_queue import Coordinator, SyncRequest
from verl_recipe_fully_async.rollouter import Rollouter

from .kill_resume import resumable_args
from .simulated import FakeTrainer, SimulatedPool, config

RUNNER = """
import os, sys
os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
import ray
ray.init(address=sys.argv[1])
from verl_recipe_fully_async.main import RECIPE
RECIPE.train(sys.argv[2:])
"""


def test_rollouter_checkpoint_mid_wave_drops_counts_and_regenerates(tmp_path):
    cfg = config(0.5, 1, 4, 4, True)
    coord = Coordinator(4, 0.5, total_samples=40)
    pool = SimulatedPool(seed=1, step_delay=0.01, min_len=6)  # 6 steps per wave: long enough to catch one
    trainer = FakeTrainer(cfg)
    rollouter = Rollouter(trainer, coord, pool)
    rollouter.step_tokens = 1  # one token per step: waves stay in flight long enough to be caught
    t = threading.Thread(target=rollouter.run)
    t.start()
    try:
        coord.get(4)
        while rollouter.wave is None or rollouter.wave.finished:  # checkpoint while a wave is in flight
            time.sleep(0.001)
        request = SyncRequest(1, payload="w1", snapshot=True)
        coord.post_sync(request)
        state = coord.wait_synced(request)
    finally:
        coord.stop()
        t.join()
    queued = state["coordinator"]["queue"]
    unfinished = state["prompts_to_generate"]
    assert state["dropped_partial_samples"] >= 1
    assert state["coordinator"]["consumed"] == 4 and state["coordinator"]["version"] == 1
    # every prompt drawn so far is trained (4), queued, or to be generated again: none lost, none twice
    drawn = set(range(trainer.drawn))
    ids = [int(p.non_tensor_batch["prompt_id"][0]) for p in unfinished]
    queued_ids = [int(s.data.non_tensor_batch["prompt_id"][0]) for s in queued]
    assert len(set(ids) | set(queued_ids)) == len(ids) + len(queued_ids)
    assert len(drawn) - 4 == len(ids) + len(queued_ids)

    # resume: the queue comes back as it was; the dropped and unstarted prompts are generated first
    coord2 = Coordinator(4, 0.5, total_samples=40)
    trainer2 = FakeTrainer(cfg)
    trainer2.drawn = trainer.drawn  # the loader continues where it was
    r2 = Rollouter(trainer2, coord2, SimulatedPool(seed=2, step_delay=0.0))
    r2.load_state_dict(state)
    assert r2.dropped_partial_samples == state["dropped_partial_samples"]
    t2 = threading.Thread(target=r2.run)
    t2.start()
    try:
        got = coord2.get(len(queued))
        assert [s.index for s in got] == [s.index for s in queued]
        assert all(a.data is b.data for a, b in zip(got, queued))
        nxt = coord2.get(len(ids))
        assert sorted(int(s.data.non_tensor_batch["prompt_id"][0]) for s in nxt) == sorted(ids)
    finally:
        coord2.stop()
        t2.join()


@pytest.mark.e2e
@pytest.mark.slow
def test_resume_after_kill_loses_nothing_it_keeps(ray_cluster, tmp_path, assets):
    import ray
    import torch
    from verl.utils.checkpoint import load_trainer_state, read_latest_step
    from verl.utils.dataset import create_rl_dataloader
    from verl_recipe_fully_async.main import RECIPE
    from verl_recipe_fully_async.trainer import FullyAsyncRayTrainer

    out = tmp_path / "run"
    args = resumable_args(assets, out, "async_training.partial_rollout_step_tokens=1")
    log = open(tmp_path / "killed_run.log", "w")
    proc = subprocess.Popen(
        [sys.executable, "-c", RUNNER, ray.get_runtime_context().gcs_address, *args],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.time() + 900
        # the tracker is written after global_step_2 is renamed into place: the checkpoint is complete
        while read_latest_step(str(out)) is None:
            assert proc.poll() is None, (tmp_path / "killed_run.log").read_text()[-3000:]
            assert time.time() < deadline, "no checkpoint within 15 minutes"
            time.sleep(0.05)
    finally:
        os.kill(proc.pid, signal.SIGKILL)  # the driver dies; Ray ends its workers and pools
        proc.wait()
    saved_steps = sorted(int(p.name.split("_")[-1]) for p in out.glob("global_step_*"))
    step = saved_steps[-1]
    assert step < 6, f"the run was not killed before it ended (checkpoints {saved_steps})"
    saved = load_trainer_state(str(out / f"global_step_{step}"))
    queue = saved["fully_async"]["coordinator"]["queue"]
    to_generate = saved["fully_async"]["prompts_to_generate"]

    consumed = []

    class Recording(FullyAsyncRayTrainer):
        def _sample_metrics(self, samples, version):
            consumed.extend(samples)
            return super()._sample_metrics(samples, version)

    from verl.trainer.main_ppo import build_trainer

    cfg = RECIPE.load_config(args)
    trainer = build_trainer(cfg, **{**RECIPE.trainer_kwargs(cfg), "trainer_cls": Recording})
    assert trainer.check_steps_remaining() == 6 - step
    trainer.init_workers()
    try:
        last = trainer.fit()
    finally:
        trainer.shutdown()
    assert last["training/global_step"] == 6 and len(consumed) == (6 - step) * 16
    assert last["fully_async/dropped_partial_samples"] == saved["fully_async"]["dropped_partial_samples"]
    # (1) the saved queue is trained first, sample for sample
    for kept, got in zip(queue, consumed):
        assert list(kept.data.non_tensor_batch["uid"]) == list(got.data.non_tensor_batch["uid"])
        assert torch.equal(kept.data.batch["responses"], got.data.batch["responses"])
        assert (kept.version, kept.index) == (got.version, got.index)

    # (2) prompts: what was drawn before the checkpoint is either trained before it, or queued, or generated
    # again now; what is trained now besides those continues the loader's order right after that point
    def prompt_id(d):
        return int(d.non_tensor_batch["index"][0])

    loader = create_rl_dataloader(
        trainer.train_dataloader.dataset,
        batch_size=int(cfg.data.gen_batch_size),
        shuffle=bool(cfg.data.shuffle),
        seed=int(cfg.data.seed),
        collate_fn=trainer.train_dataloader.collate_fn,
        drop_last=True,
    )
    order = [int(i) for batch in loader for i in batch["index"]]
    drawn = saved["batches_consumed"] * int(cfg.data.gen_batch_size)
    kept = {prompt_id(s.data) for s in queue} | {prompt_id(p) for p in to_generate}
    assert len(kept) == len(queue) + len(to_generate) and kept <= set(order[:drawn])
    after = [prompt_id(s.data) for s in consumed]
    assert len(set(after)) == len(after)  # no prompt twice (96 prompts: less than one epoch)
    assert kept <= set(after)
    fresh = set(after) - kept
    assert fresh == set(order[drawn : drawn + len(fresh)])
    assert np.all(np.diff(saved_steps) == 2)
