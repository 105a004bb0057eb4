"""verl.rewards: rule scorers, reward managers, code sandboxes and model reward models.

`default_compute_score` is the upstream-compatible scorer entry point; reward managers live in
`verl.rewards.managers` and register into `verl.registries.REWARD_MANAGERS` (via `verl.rewards.plugin`).
Heavy pieces (torch, math-verify, transformers) load on first use.
"""

__all__ = ["default_compute_score", "register_scorer", "SCORERS", "load_reward_manager"]


def __getattr__(name):
    if name in ("default_compute_score", "register_scorer", "SCORERS"):
        from verl.rewards import scoring

        return getattr(scoring, name)
    if name == "load_reward_manager":
        from verl.rewards.managers.loader import load_reward_manager

        return load_reward_manager
    raise AttributeError(f"module 'verl.rewards' has no attribute {name!r}")
