"""Values derived from a loaded config (never written back over what the user set)."""

from __future__ import annotations

from omegaconf import DictConfig


def world_size(cfg: DictConfig) -> int:
    """Number of workers in the actor/rollout group: trainer.nnodes * trainer.n_gpus_per_node."""
    return int(cfg.trainer.nnodes) * int(cfg.trainer.n_gpus_per_node)


def resolve_device(cfg: DictConfig) -> str:
    """``trainer.device`` with ``auto`` (or unset) replaced by ``cuda`` when available, else ``cpu``."""
    device = cfg.trainer.device
    if device in (None, "auto"):
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    return str(device)


def use_critic(cfg: DictConfig) -> bool:
    """Whether a critic (value model) worker group is needed: critic.enable, or by default iff gae."""
    if cfg.critic.enable is not None:
        return bool(cfg.critic.enable)
    return cfg.algorithm.adv_estimator == "gae"


def use_reference_policy(cfg: DictConfig) -> bool:
    """A reference model is needed for a KL loss or a KL penalty in the reward."""
    return bool(cfg.algorithm.use_kl_in_reward or cfg.actor_rollout_ref.actor.use_kl_loss)


def trajectories_per_step(cfg: DictConfig) -> int:
    """data.train_batch_size prompts x rollout.n samples each."""
    return int(cfg.data.train_batch_size) * int(cfg.actor_rollout_ref.rollout.n)


def tokenizer_path(cfg: DictConfig) -> str | None:
    """actor_rollout_ref.model.tokenizer_path, defaulting to the model path."""
    model = cfg.actor_rollout_ref.model
    return model.tokenizer_path if model.tokenizer_path is not None else model.path
