"""Validation of the ``reward`` section: when scoring runs against the rest of the step, and what the settings
name (the manager in the registry, filled by verl-rewards and recipes; a custom reward function's file), checked
before Ray starts and before a recipe builds its assets (the driver would otherwise find them only when it
builds the reward managers)."""

from __future__ import annotations

import os

from omegaconf import DictConfig

from verl.trainer.config.distillation import distillation_enabled

__all__ = ["check_reward", "check_reward_scheduling"]


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
    if distillation_enabled(cfg) and float(cfg.distillation.distillation_loss.lmbda) < 1.0:
        problems.append(
            "reward.use_reward_loop=true scores each sample as it is generated, but "
            f"distillation.distillation_loss.lmbda={cfg.distillation.distillation_loss.lmbda} < 1 replaces some rows' "
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


def check_reward(cfg: DictConfig, problems: list[str]) -> None:
    """The manager named by ``reward.reward_manager`` exists and takes overlong shaping when it is on (without
    verl-rewards installed the loader says what to install); a custom reward function in a local file can be
    called the way that manager calls it."""
    from verl.registries import REWARD_MANAGERS
    from verl.utils.registry import UnknownNameError

    name = cfg.reward.reward_manager
    try:
        cls = REWARD_MANAGERS.get(name)
    except UnknownNameError as e:
        problems.append(f"reward.reward_manager={name!r}: {e.args[0] if e.args else e}")
        return
    except ImportError:
        return
    if cfg.reward.overlong_buffer.enable:
        from verl.trainer.ppo.reward import takes_option

        if not takes_option(cls, "overlong_buffer"):
            problems.append(
                f"reward.overlong_buffer.enable=true needs a reward manager that shapes overlong responses "
                f"(reward.reward_manager=dapo); {name!r} ({cls.__qualname__}) does not"
            )
    _check_custom_function(cfg, name, problems)


def _check_custom_function(cfg: DictConfig, manager: str, problems: list[str]) -> None:
    custom = cfg.reward.custom_reward_function
    if not custom.path or not os.path.isfile(os.path.expanduser(str(custom.path))):
        return  # a path that is not here yet (made by a recipe, on another machine) is loaded by the driver
    from verl.trainer.ppo.reward import load_custom_reward_function

    batched = manager == "batch"
    try:
        load_custom_reward_function(str(custom.path), custom.name or "compute_score", dict(custom.reward_kwargs or {}),
                                    batched=batched)  # fmt: skip
    except (ImportError, AttributeError, TypeError) as e:
        how = "with lists of samples" if batched else "one sample at a time"
        problems.append(f"reward.reward_manager={manager} calls reward.custom_reward_function {how}: {e}")
