"""Validation of the reward settings against what they name: the manager in the registry (filled by
verl-rewards and recipes) and a custom reward function's file, both checked before Ray starts and before a
recipe builds its assets (the driver would otherwise find them only when it builds the reward managers)."""

from __future__ import annotations

import os

from omegaconf import DictConfig


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
