"""``load_reward_manager`` for callers holding only the ``reward`` config section.

A thin wrapper over core's ``verl.trainer.ppo.reward.load_reward_manager`` (the one implementation,
used by ``main_ppo`` with the whole trainer config), so the two entry points cannot drift. The keys it
reads and what it does with them are documented there; in short::

    reward:
      reward_manager: naive            # naive | batch | dapo | prime (REWARD_MANAGERS)
      reward_kwargs: {}                # manager options (count_errors_as_zero, combine_rm_scores,
                                       # num_processes / timeout (prime), max_workers (batch),
                                       # judge: {...} (see verl.rewards.models.judge))
      overlong_buffer: {enable: false, len: 0, penalty_factor: 1.0, log: false}   # dapo only
      custom_reward_function: {path: null, name: compute_score, reward_kwargs: {}}
      sandbox: {name: local, ...}      # for code rows of the built-in scorer
"""

from __future__ import annotations

from typing import Any


def load_reward_manager(
    config: Any,
    tokenizer: Any,
    num_examine: int,
    *,
    max_resp_len: int | None = None,
    reward_fn_key: str | None = None,
    **reward_kwargs: Any,
):
    """The reward manager named by ``config.reward_manager`` (``config`` is the ``reward`` section).

    ``max_resp_len`` is the response budget for overlong shaping (used only when
    ``overlong_buffer.enable``); ``reward_fn_key`` (else ``config.reward_fn_key``, else
    ``data_source``) names each row's data source; extra ``reward_kwargs`` override
    ``config.reward_kwargs``. Equivalent to core's loader on ``{"reward": config, "data": {...}}``.
    """
    from omegaconf import DictConfig, OmegaConf
    from verl.trainer.ppo.reward import load_reward_manager as load_from_trainer_config

    if isinstance(config, DictConfig):
        # Resolve against the original root: the section may interpolate other trainer keys.
        config = OmegaConf.to_container(config, resolve=True)
    config = {} if config is None else config
    if not isinstance(config, dict):
        raise TypeError(
            f"load_reward_manager expects the reward config section (a mapping), got {type(config).__name__}"
        )
    key = reward_fn_key or config.get("reward_fn_key") or "data_source"
    trainer_config = OmegaConf.create({"reward": config, "data": {"reward_fn_key": key}})
    if max_resp_len is not None:
        reward_kwargs["max_resp_len"] = max_resp_len
    return load_from_trainer_config(trainer_config, tokenizer, num_examine, **reward_kwargs)
