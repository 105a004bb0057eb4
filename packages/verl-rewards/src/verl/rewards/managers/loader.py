"""Build the configured reward manager from the ``reward`` config section (verl.trainer.config).

Keys read (all optional; the names of core's ``RewardConfig``)::

    reward:
      reward_manager: naive            # naive | batch | dapo | prime (REWARD_MANAGERS)
      reward_kwargs: {}                # manager options: count_errors_as_zero, combine_rm_scores,
                                       # num_processes / timeout (prime), max_workers (batch),
                                       # judge: {...} (a generative judge, see verl.rewards.models.judge)
      overlong_buffer: {enable: false, len: 0, penalty_factor: 1.0, log: false}   # dapo only
      custom_reward_function: {path: null, name: compute_score, reward_kwargs: {}}
      sandbox: {name: local, ...}      # for code rows of the built-in scorer; the other keys are the
                                       # sandbox's options (timeout, memory_mb, url, isolation, ...)

``main_ppo`` calls ``load_reward_manager(cfg.reward, tokenizer, cfg.reward.num_examine,
max_resp_len=cfg.actor_rollout_ref.rollout.response_length, reward_fn_key=cfg.data.reward_fn_key)``.
"""

from __future__ import annotations

from typing import Any


def _plain(x: Any) -> Any:
    from omegaconf import DictConfig, ListConfig, OmegaConf

    if isinstance(x, DictConfig | ListConfig):
        return OmegaConf.to_container(x, resolve=True)
    return x


def load_reward_manager(
    config: Any,
    tokenizer,
    num_examine: int,
    *,
    max_resp_len: int | None = None,
    reward_fn_key: str | None = None,
    **reward_kwargs: Any,
):
    """The reward manager named by ``config.reward_manager`` (``config`` is the ``reward`` section).

    ``max_resp_len`` reaches the ``dapo`` manager only; extra ``reward_kwargs`` override
    ``config.reward_kwargs``.
    """
    from verl.registries import REWARD_MANAGERS
    from verl.rewards.managers.dapo import DAPORewardManager
    from verl.rewards.scoring.custom import load_custom_reward_function

    cfg = _plain(config) or {}
    if not isinstance(cfg, dict):
        raise TypeError(
            f"load_reward_manager expects the reward config section (a mapping), got {type(config).__name__}"
        )
    name = cfg.get("reward_manager") or "naive"
    cls = REWARD_MANAGERS.get(name)
    kwargs = dict(cfg.get("reward_kwargs") or {})
    kwargs.update(reward_kwargs)

    overlong = dict(cfg.get("overlong_buffer") or {})
    if issubclass(cls, DAPORewardManager):
        kwargs.setdefault("overlong_buffer", overlong)
        kwargs.setdefault("max_resp_len", max_resp_len)
    elif overlong.get("enable"):
        raise ValueError(
            f"reward.overlong_buffer.enable=true needs reward.reward_manager=dapo (got {name!r})"
        )

    compute_score = None
    custom = cfg.get("custom_reward_function") or {}
    if custom.get("path"):
        compute_score = load_custom_reward_function(
            custom["path"],
            custom.get("name") or "compute_score",
            custom.get("reward_kwargs") or {},
            batched=name == "batch",
        )
    judge = dict(kwargs.pop("judge", None) or (cfg.get("reward_model") or {}).get("judge") or {})
    if judge.get("enable"):
        from verl.rewards.models.judge import build_judge_scorer

        compute_score = build_judge_scorer(judge, rule=compute_score)
    sandbox = dict(cfg.get("sandbox") or {})
    if (not custom.get("path")) and sandbox:
        score_kwargs = dict(kwargs.pop("score_kwargs", None) or {})
        score_kwargs.setdefault("sandbox", sandbox.pop("name", "local"))
        score_kwargs.setdefault("sandbox_options", sandbox)
        kwargs["score_kwargs"] = score_kwargs
    key = reward_fn_key or cfg.get("reward_fn_key") or "data_source"
    return cls(tokenizer, num_examine, compute_score=compute_score, reward_fn_key=key, **kwargs)
