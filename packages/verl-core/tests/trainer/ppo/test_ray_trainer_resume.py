"""Checkpoint/resume through the trainer: a crash mid-save keeps the previous checkpoint usable,
resuming mid-epoch and at an epoch boundary replays exactly the uninterrupted run, pruning keeps the
newest, and a run with nothing left to train says so."""

import os

import pytest
import torch
from verl.trainer.ppo.ray_trainer import NothingToTrainError
from verl.utils.checkpoint import TRACKER_FILE, list_checkpoints, load_trainer_state, read_latest_step

from . import bandit_workers as bw
from .test_ray_trainer import BanditTrainer, bandit_config, make_trainer


class RecordingTrainer(BanditTrainer):
    """Records, per step, the prompt indices trained on and every row's reward (score minus the KL
    penalty, so the KL controller's state matters) and old log-prob."""

    crash_at_save_step = None

    def train_step(self, batch, metrics, timing_raw):
        out = super().train_step(batch, metrics, timing_raw)
        self.record.append((self.global_steps, out.non_tensor_batch["index"].tolist(),
                            out.batch["token_level_rewards"].sum(-1).tolist(),
                            out.batch["old_log_probs"].sum(-1).tolist()))
        return out

    def trainer_state(self):
        if self.global_steps == self.crash_at_save_step:
            raise RuntimeError(f"injected crash while saving step {self.global_steps}")
        return super().trainer_state()


def _config(root, total, *extra):
    # 32 prompts / 8 per step = 4 steps per epoch.
    return bandit_config(root, "algorithm.adv_estimator=grpo", "trainer.total_epochs=2",
                         f"trainer.total_training_steps={total}", "trainer.save_freq=1",
                         "trainer.val_before_train=false", "trainer.test_freq=-1",
                         "trainer.logger=[jsonl]", "trainer.experiment_name=resume",
                         # KL in the reward with an adaptive coefficient: its state must survive resumes too.
                         "algorithm.use_kl_in_reward=true", "algorithm.kl_ctrl.type=adaptive",
                         "algorithm.kl_ctrl.kl_coef=0.05", "algorithm.kl_ctrl.target_kl=0.01",
                         "algorithm.kl_ctrl.horizon=100", *extra)


def _trainer(cfg, workers_from=None):
    """A new trainer; with workers_from, it drives the same worker processes (their state is
    overwritten by the checkpoint load, which is what the test checks)."""
    if workers_from is None:
        t = make_trainer(cfg, trainer_cls=RecordingTrainer)
    else:
        t = RecordingTrainer(cfg, tokenizer=None, role_worker_mapping=workers_from.role_worker_mapping,
                             resource_pool_manager=workers_from.resource_pool_manager,
                             reward_fn=workers_from.reward_fn, val_reward_fn=None,
                             train_dataset=workers_from.train_dataloader.dataset, collate_fn=bw.collate_rows)
        t.actor_rollout_wg = workers_from.actor_rollout_wg
        t.ref_policy_wg = workers_from.ref_policy_wg
    t.record = []
    return t


def test_crash_resume_epoch_boundary_and_nothing_left(ray_cluster, tmp_path):
    # Reference: 6 uninterrupted steps, keeping only the 2 newest checkpoints.
    ref_dir = tmp_path / "ref"
    ref = _trainer(_config(ref_dir, 6, "trainer.max_actor_ckpt_to_keep=2"))
    ref.fit()
    expected = {step: rec for step, *rec in ref.record}
    assert sorted(expected) == [1, 2, 3, 4, 5, 6]
    assert [s for s, _ in list_checkpoints(str(ref_dir))] == [5, 6]
    assert (ref_dir / TRACKER_FILE).read_text() == "6"

    # Run 1 crashes while saving step 3 (the workers already wrote their part).
    run_dir = tmp_path / "run"
    r1 = _trainer(_config(run_dir, 3))
    r1.crash_at_save_step = 3
    with pytest.raises(RuntimeError, match="injected crash while saving step 3"):
        r1.fit()
    assert read_latest_step(str(run_dir)) == 2
    assert not (run_dir / "global_step_3").exists()
    assert sorted(n for n in os.listdir(run_dir) if n.startswith(("global", ".tmp"))) == ["global_step_1", "global_step_2"]

    # Run 2 resumes mid-epoch from step 2 and ends at the epoch boundary (step 4).
    r2 = _trainer(_config(run_dir, 4), workers_from=r1)
    r2.fit()
    assert [s for s, *_ in r2.record] == [3, 4]
    for step, *rec in r2.record:
        assert rec == expected[step], f"step {step} differs from the uninterrupted run"
    state = load_trainer_state(str(run_dir / "global_step_4"))
    assert state["global_step"] == 4 and state["epoch"] == 0 and state["dataloader"]["epoch"] == 1
    assert state["kl_ctrl"]["value"] != 0.05  # the adaptive coefficient moved and was saved

    # Run 3 resumes exactly at the epoch boundary: the next epoch's first batch, same RNG.
    r3 = _trainer(_config(run_dir, 6), workers_from=r1)
    r3.fit()
    assert [s for s, *_ in r3.record] == [5, 6]
    for step, *rec in r3.record:
        assert rec == expected[step], f"step {step} differs from the uninterrupted run"
    assert r3.epoch == 1

    # Run 4: the checkpoint is already at the last step; it must not silently "succeed".
    r4 = _trainer(_config(run_dir, 6), workers_from=r1)
    with pytest.raises(NothingToTrainError, match=r"step 6.*ends at step 6"):
        r4.fit()
    assert r4.record == []

    # resume_mode=disable starts over at step 1 even though checkpoints exist.
    r5 = _trainer(_config(tmp_path / "run", 1, "trainer.resume_mode=disable", "trainer.save_freq=-1"), workers_from=r1)
    r5.fit()
    assert [s for s, *_ in r5.record] == [1]
    # resume_path picks a given checkpoint (not the latest): from step 4, step 5 replays exactly.
    r5b = _trainer(_config(run_dir, 5, "trainer.resume_mode=resume_path", f"trainer.resume_from_path={run_dir}/global_step_4",
                           "trainer.save_freq=-1"), workers_from=r1)
    r5b.fit()
    assert [s for s, *_ in r5b.record] == [5] and list(r5b.record[0][1:]) == expected[5]
    # resume_path to a dir that is not a checkpoint names the problem.
    r6 = _trainer(_config(run_dir, 6, "trainer.resume_mode=resume_path", f"trainer.resume_from_path={tmp_path}"),
                  workers_from=r1)
    with pytest.raises(ValueError, match="global_step_N"):
        r6.fit()
    assert torch.is_tensor(state["rng"]["torch"])
