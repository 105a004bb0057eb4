"""Which keys may change when a run resumes: a checkpoint records the keys it depends on
(``RESUME_FIXED_KEYS``); a resumed run that changed one is refused before any worker starts, naming the
key, both values and the checkpoint file; growing the run is allowed."""

import pytest
from verl.trainer.ppo.checkpointing import RESUME_FIXED_KEYS
from verl.trainer.ppo.ray_trainer import NothingToTrainError, ResourcePoolManager, Role
from verl.utils.checkpoint import atomic_checkpoint, save_trainer_state

from . import bandit_workers as bw
from .test_ray_trainer import BanditTrainer, bandit_config


def _trainer(cfg):
    """A trainer whose workers are never started: the checks run before them."""
    mapping = {Role.ActorRollout: bw.BanditActorRolloutRef}
    rpm = ResourcePoolManager({"global_pool": [2]}, {Role.ActorRollout: "global_pool"}, use_gpu=False)
    return BanditTrainer(
        cfg,
        tokenizer=None,
        role_worker_mapping=mapping,
        resource_pool_manager=rpm,
        reward_fn=bw.bandit_reward_fn,
        train_dataset=bw.make_prompts(32, seed=1),
        collate_fn=bw.collate_rows,
    )


def _checkpoint_at(root, step, *overrides):
    t = _trainer(bandit_config(root, "trainer.total_training_steps=4", *overrides))
    t.global_steps = step
    with atomic_checkpoint(str(root), step) as tmp:
        save_trainer_state(tmp, t.trainer_state())


@pytest.mark.parametrize(
    "override, key",
    [
        ("actor_rollout_ref.model.path=other_model", "actor_rollout_ref.model.path"),
        ("data.train_batch_size=4", "data.train_batch_size"),
        ("actor_rollout_ref.rollout.n=2", "actor_rollout_ref.rollout.n"),
        ("actor_rollout_ref.actor.optim.lr=0.01", "actor_rollout_ref.actor.optim.lr"),
        ("data.seed=5", "data.seed"),
    ],
)
def test_changed_key_is_refused_naming_it(tmp_path, override, key):
    assert key in RESUME_FIXED_KEYS
    _checkpoint_at(tmp_path, 2)
    t = _trainer(
        bandit_config(tmp_path, "trainer.total_training_steps=4", "trainer.resume_mode=auto", override)
    )
    with pytest.raises(ValueError, match=rf"cannot resume from .*global_step_2/trainer_state.pt: {key}: "):
        t.check_steps_remaining()


def test_growing_the_run_and_other_keys_may_change(tmp_path):
    _checkpoint_at(tmp_path, 4)
    same = _trainer(bandit_config(tmp_path, "trainer.total_training_steps=4"))
    with pytest.raises(NothingToTrainError, match="step 4"):
        same.check_steps_remaining()
    grown = _trainer(
        bandit_config(
            tmp_path,
            "trainer.total_training_steps=7",
            "trainer.save_freq=3",
            "trainer.test_freq=2",
            "trainer.logger=[jsonl]",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
        )
    )
    assert grown.check_steps_remaining() == 3


def test_checkpoint_without_recorded_keys_still_resumes(tmp_path):
    """Checkpoints written before the keys were recorded: nothing to compare, no refusal."""
    t = _trainer(bandit_config(tmp_path, "trainer.total_training_steps=4"))
    t.global_steps = 1
    state = t.trainer_state()
    del state["resume_identity"]
    with atomic_checkpoint(str(tmp_path), 1) as tmp:
        save_trainer_state(tmp, state)
    other = _trainer(bandit_config(tmp_path, "trainer.total_training_steps=4", "data.train_batch_size=4"))
    assert other.check_steps_remaining() == 3
