"""Validation of the ``reward`` section's scheduling: when scoring runs against the rest of the step."""

from __future__ import annotations

from omegaconf import DictConfig

__all__ = ["check_reward_scheduling"]


def check_reward_scheduling(cfg: DictConfig, problems: list[str]) -> None:
    """``reward.launch_reward_fn_async`` (scoring overlaps the log-prob passes) and ``reward.use_reward_loop``
    (scoring overlaps generation, ``verl.trainer.ppo.reward_loop``): what each can be combined with."""
    reward, algo = cfg.reward, cfg.algorithm
    if reward.launch_reward_fn_async and algo.filter_groups.enable:
        problems.append(
            "reward.launch_reward_fn_async=true scores while the log-probs are computed, but "
            "algorithm.filter_groups.enable=true drops groups by score before those passes; use one of them"
        )
    if int(reward.num_workers) < 1:
        problems.append(f"reward.num_workers={reward.num_workers} must be >= 1 (samples the reward loop scores at once)")
    if int(reward.reward_loop_chunks) < 1:
        problems.append(f"reward.reward_loop_chunks={reward.reward_loop_chunks} must be >= 1")
    if not reward.use_reward_loop:
        return
    if reward.launch_reward_fn_async:
        problems.append(
            "reward.use_reward_loop=true scores each chunk while the next one generates, and "
            "reward.launch_reward_fn_async=true scores the whole batch during the log-prob passes: two "
            "schedules for one reward; use one of them"
        )
    if reward.reward_model.enable:
        problems.append(
            "reward.use_reward_loop=true with reward.reward_model.enable=true: the reward loop scores on driver "
            "threads (rule and sandbox scorers, a generative judge via reward.reward_kwargs.judge); the reward "
            "model's forward pass on its worker group is not run in it; set reward.use_reward_loop=false"
        )
    if reward.reward_manager == "batch":
        problems.append(
            "reward.use_reward_loop=true scores samples apart, but reward.reward_manager=batch calls its scorer "
            "once with the whole batch; use naive, dapo or prime, or reward.use_reward_loop=false"
        )
    distill = cfg.get("distillation")
    if distill is not None and distill.enabled and float(distill.distillation_loss.lmbda) < 1.0:
        problems.append(
            "reward.use_reward_loop=true scores each sample as it is generated, but "
            f"distillation.distillation_loss.lmbda={distill.distillation_loss.lmbda} < 1 replaces some rows' "
            "responses with their targets after generation (the gkd_mix stage), so those scores would be of "
            "the discarded responses; set reward.use_reward_loop=false or lmbda=1"
        )
    prompts = int(cfg.data.gen_batch_size if algo.filter_groups.enable else cfg.data.train_batch_size)
    if int(reward.reward_loop_chunks) > prompts:
        problems.append(
            f"reward.reward_loop_chunks={reward.reward_loop_chunks} is more than the {prompts} prompts generated "
            f"per round (data.{'gen' if algo.filter_groups.enable else 'train'}_batch_size); a chunk holds whole "
            "groups, at least one prompt each"
        )
