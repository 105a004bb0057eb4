"""Build the configured reward manager from the ``reward`` config section.

Keys read (all optional)::

    reward:
      reward_manager: naive            # naive | batch | dapo | prime (REWARD_MANAGERS)
      reward_kwargs: {}                # manager options, e.g. count_errors_as_zero, max_resp_len,
                                       # overlong_buffer {enable, len, penalty_factor, log},
                                       # num_processes, timeout
      custom_reward_function:
        path: null                     # a .py file; default: verl.rewards.default_compute_score
        name: compute_score
        reward_kwargs: {}              # bound to the user's function
      reward_model:
        judge: {enable: false, ...}    # a generative judge added to the rule score
                                       # (verl.rewards.models.judge documents its keys)
      sandbox:                         # for code rows of the default scorer
        name: local                    # local | sandbox_fusion | e2b
        ...                            # that sandbox's options (url, timeout, memory_mb, ...)
"""

from __future__ import annotations

from typing import Any


def _plain(x: Any) -> Any:
    try:
        from omegaconf import DictConfig, ListConfig, OmegaConf
    except ImportError:  # pragma: no cover - omegaconf is a core dependency
        return x
    if isinstance(x, DictConfig | ListConfig):
        return OmegaConf.to_container(x, resolve=True)
    return x


def load_reward_manager(config: Any, tokenizer, num_examine: int, **reward_kwargs: Any):
    """The reward manager named by ``config.reward_manager`` (``config`` is the ``reward`` section).

    Extra ``reward_kwargs`` override ``config.reward_kwargs``.
    """
    from verl.registries import REWARD_MANAGERS
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

    compute_score = None
    custom = cfg.get("custom_reward_function") or {}
    if custom.get("path"):
        compute_score = load_custom_reward_function(
            custom["path"],
            custom.get("name") or "compute_score",
            custom.get("reward_kwargs") or {},
            batched=name == "batch",
        )
    judge = dict((cfg.get("reward_model") or {}).get("judge") or {})
    if judge.get("enable"):
        from verl.rewards.models.judge import build_judge_scorer

        compute_score = build_judge_scorer(judge, rule=compute_score)
    sandbox = dict(cfg.get("sandbox") or {})
    if (compute_score is None or judge.get("enable")) and sandbox:
        score_kwargs = dict(kwargs.pop("score_kwargs", None) or {})
        score_kwargs.setdefault("sandbox", sandbox.pop("name", "local"))
        score_kwargs.setdefault("sandbox_options", sandbox)
        kwargs["score_kwargs"] = score_kwargs
    return cls(
        tokenizer,
        num_examine,
        compute_score=compute_score,
        reward_fn_key=cfg.get("reward_fn_key") or "data_source",
        **kwargs,
    )
