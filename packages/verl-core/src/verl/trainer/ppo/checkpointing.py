"""Checkpoint and resume for ``RayPPOTrainer``: the driver's state, the workers' checkpoints, the
checks that a resumed run is the run that was saved.

``CheckpointMixin`` is mixed into the trainer; its public methods are hooks a recipe extends
(``save_worker_checkpoints`` / ``load_worker_checkpoints`` for a model it trains besides the actor,
``trainer_state`` / ``load_checkpoint`` for driver state of its own).
"""

from __future__ import annotations

import os
from typing import Any

from verl.utils import checkpoint as ckpt

__all__ = ["RESUME_FIXED_KEYS", "CheckpointMixin", "NothingToTrainError", "check_resume_identity", "resume_identity"]


class NothingToTrainError(RuntimeError):
    """A run was asked to continue from a checkpoint that already reached its last step."""


#: Keys a resumed run must keep: the checkpoint's weights, optimizer, LR schedule or data position are only
#: meaningful with them (a new ``optim.lr`` would be silently overridden by the restored schedule; a new
#: batch size or data file would make the saved data position point elsewhere). Everything else may change,
#: e.g. ``trainer.total_training_steps`` / ``total_epochs`` (grow the run; the LR schedule follows the new
#: total), ``save_freq``, ``test_freq``, ``logger``, micro batch sizes, the worker count (DCP reshards).
RESUME_FIXED_KEYS = (
    "actor_rollout_ref.model.path",
    "critic.model.path",
    "data.train_files",
    "data.train_batch_size",
    "data.gen_batch_size",
    "data.shuffle",
    "data.seed",
    "actor_rollout_ref.rollout.n",
    "actor_rollout_ref.actor.ppo_mini_batch_size",
    "actor_rollout_ref.actor.optim.lr",
    "critic.optim.lr",
    "algorithm.adv_estimator",
)


def resume_identity(config: Any) -> dict[str, Any]:
    """The values of `RESUME_FIXED_KEYS` in ``config`` (plain Python), saved with every checkpoint."""
    from omegaconf import OmegaConf

    out = {}
    for key in RESUME_FIXED_KEYS:
        value = OmegaConf.select(config, key, default=None)
        out[key] = OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value
    return out


def check_resume_identity(saved: dict[str, Any] | None, config: Any, state_file: str) -> None:
    """Refuse to resume when a key of `RESUME_FIXED_KEYS` differs from the checkpoint's run."""
    if saved is None:  # a checkpoint written before the identity was recorded
        return
    now = resume_identity(config)
    changed = [f"{k}: {saved[k]!r} in the checkpoint, {now[k]!r} now" for k in saved if k in now and saved[k] != now[k]]
    if changed:
        raise ValueError(
            f"cannot resume from {state_file}: " + "; ".join(changed) + ". These keys cannot change on resume "
            f"({', '.join(RESUME_FIXED_KEYS)}); keys such as trainer.total_training_steps, trainer.total_epochs, "
            "trainer.save_freq and trainer.test_freq may. Restore the old values, or start a new run with "
            "trainer.resume_mode=disable or another trainer.default_local_dir."
        )


class CheckpointMixin:
    """``global_step_N`` checkpoints of a ``RayPPOTrainer`` (expects its attributes)."""

    def trainer_state(self) -> dict[str, Any]:
        """What the driver saves in ``trainer_state.pt`` (a hook: extend it with state of your own)."""
        return {
            "global_step": self.global_steps,
            "epoch": self.epoch,
            "batches_consumed": self._batches_consumed,
            "dataloader": self.train_dataloader.state_dict(),
            "rng": ckpt.get_rng_state(),
            "kl_ctrl": self.kl_ctrl_in_reward.state_dict() if self.kl_ctrl_in_reward is not None else None,
            "total_training_steps": self.total_training_steps,
            "resume_identity": resume_identity(self.config),
        }

    def save_checkpoint(self) -> str:
        """Save ``global_step_{N}`` atomically: workers fill ``actor/`` and ``critic/``, the driver its
        ``trainer_state.pt``; then prune to ``max_actor_ckpt_to_keep`` / ``max_critic_ckpt_to_keep``."""
        t = self.config.trainer
        root = t.default_local_dir
        with ckpt.atomic_checkpoint(root, self.global_steps) as tmp:
            self.save_worker_checkpoints(tmp)
            ckpt.save_trainer_state(tmp, self.trainer_state())
        limits = [x for x in (t.max_actor_ckpt_to_keep, t.max_critic_ckpt_to_keep) if x is not None and x > 0]
        keep = max(limits) if limits else None
        ckpt.prune_checkpoints(root, keep, {"actor": t.max_actor_ckpt_to_keep, "critic": t.max_critic_ckpt_to_keep})
        return os.path.join(root, f"global_step_{self.global_steps}")

    def save_worker_checkpoints(self, ckpt_dir: str) -> None:
        """Each trained role saves into its subfolder of ``ckpt_dir`` (``actor/``, ``critic/``).

        A hook: a recipe that trains another model (e.g. an online reward model) extends it, and
        `load_worker_checkpoints` with it. Pruning is the driver's job (whole dirs): max_ckpt_to_keep=None.
        """
        self.actor_rollout_wg.save_checkpoint(os.path.join(ckpt_dir, "actor"), self.global_steps, None)
        if self.use_critic:
            self.critic_wg.save_checkpoint(os.path.join(ckpt_dir, "critic"), self.global_steps, None)

    def load_worker_checkpoints(self, ckpt_dir: str) -> None:
        """Load what `save_worker_checkpoints` wrote (a hook, extended together with it)."""
        self.actor_rollout_wg.load_checkpoint(os.path.join(ckpt_dir, "actor"))
        if self.use_critic:
            self.critic_wg.load_checkpoint(os.path.join(ckpt_dir, "critic"))

    def resume_path(self) -> str | None:
        """The ``global_step_N`` folder this run resumes from (``trainer.resume_mode``), or None."""
        t = self.config.trainer
        if t.resume_mode == "disable":
            return None
        if t.resume_mode == "auto":
            return ckpt.find_latest_ckpt_path(t.default_local_dir)
        if t.resume_mode == "resume_path":
            path = str(t.resume_from_path)
            if not os.path.basename(os.path.normpath(path)).startswith("global_step_"):
                raise ValueError(f"trainer.resume_from_path={path!r} must be a global_step_N directory")
            if not os.path.isdir(path):
                raise FileNotFoundError(f"trainer.resume_from_path={path!r}: no such directory")
            return path
        raise ValueError(f"trainer.resume_mode={t.resume_mode!r}; expected auto, disable or resume_path")

    def check_steps_remaining(self) -> int:
        """Steps left after resuming (reads only ``trainer_state.pt``, so it can run before the
        workers start). Raises `NothingToTrainError` when there are none."""
        path = self.resume_path()
        done = 0
        if path is not None:
            state = ckpt.load_trainer_state(path)
            check_resume_identity(state.get("resume_identity"), self.config, os.path.join(path, ckpt.TRAINER_STATE_FILE))
            done = int(state["global_step"])
        total = self.total_training_steps
        if done >= total:
            t = self.config.trainer
            raise NothingToTrainError(
                f"nothing to train: the checkpoint in {path} is at step {done} and the run ends at step "
                f"{total} (trainer.total_epochs={t.total_epochs}, trainer.total_training_steps="
                f"{t.total_training_steps}, {len(self.train_dataloader)} batches per epoch). Raise "
                f"total_epochs/total_training_steps to train further, or start over with "
                f"trainer.resume_mode=disable or another trainer.default_local_dir."
            )
        return total - done

    def load_checkpoint(self) -> int:
        """Restore step, data position, RNG, KL controller and the workers' state; returns the step."""
        self._resumed_from = None
        path = self.resume_path()
        if path is None:
            return 0
        state = ckpt.load_trainer_state(path)
        self.global_steps = int(state["global_step"])
        self.epoch = int(state["epoch"])
        self._batches_consumed = int(state["batches_consumed"])
        self.load_worker_checkpoints(path)
        self.train_dataloader.load_state_dict(state["dataloader"])
        self._train_iter = None
        ckpt.set_rng_state(state["rng"])
        if self.kl_ctrl_in_reward is not None and state["kl_ctrl"] is not None:
            self.kl_ctrl_in_reward.load_state_dict(state["kl_ctrl"])
        self._resumed_from = path
        print(f"resumed from {path} at step {self.global_steps} (epoch {self.epoch})", flush=True)
        return self.global_steps
