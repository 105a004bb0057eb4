"""verl.rewards: rule scorers, reward managers, code sandboxes and model reward models.

`default_compute_score` is the upstream-compatible scorer entry point; reward managers live in
`verl.rewards.managers` and register into `verl.registries.REWARD_MANAGERS` (via `verl.rewards.plugin`).
`load_reward_manager(reward_section, tokenizer, num_examine)` is a thin wrapper over core's
`verl.trainer.ppo.reward.load_reward_manager` (the one implementation). Heavy pieces (torch,
math-verify, transformers) load on first use.
"""

from verl.trainer.ppo.reward import SCORE_WRAPPERS as _SCORE_WRAPPERS

__all__ = ["default_compute_score", "register_scorer", "SCORERS", "load_reward_manager"]


def _judge_score_wrapper(judge_cfg: dict, rule=None):
    """``reward_kwargs.judge`` for core's loader: the rule scorer plus a generative judge."""
    from verl.rewards.models.judge import build_judge_scorer

    return build_judge_scorer(judge_cfg, rule=rule)


# Registered on package import, so it is in place whenever the verl.rewards plugin (or anything in
# verl.rewards) has been imported; core's loader finds it through the registry, not by import.
_SCORE_WRAPPERS.register("judge", _judge_score_wrapper)


def __getattr__(name):
    if name in ("default_compute_score", "register_scorer", "SCORERS"):
        from verl.rewards import scoring

        return getattr(scoring, name)
    if name == "load_reward_manager":
        from verl.rewards.managers.loader import load_reward_manager

        return load_reward_manager
    raise AttributeError(f"module 'verl.rewards' has no attribute {name!r}")
