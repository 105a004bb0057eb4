"""SPPO's config: core's typed schema plus three keys, loaded and validated once.

The recipe extends core's dataclasses instead of copying them (``load_config(schema=...)``): every core
key keeps its type, default and validation, and the two new keys are typed too, so an unknown or
mistyped key is still an error before anything starts.

- ``algorithm.sppo_eta`` (default 1.0, upstream): ``beta`` of the ``sppo`` estimator's softmean;
- ``algorithm.sppo_baseline`` (``batch`` | ``group``): the rows the ``sppo`` estimator's softmean runs over.
  ``batch`` (upstream): the whole batch, so upstream's setting (``rollout.n=1``) runs; ``group``: the
  ``rollout.n`` answers to the same prompt (needs ``rollout.n >= 2``);
- ``actor_rollout_ref.actor.sppo_eta`` (default ``${algorithm.sppo_eta}``, upstream's actor key):
  ``eta`` of the ``sppo`` policy loss (the worker only sees the actor section).

`validate_sppo_config` adds what SPPO needs to core's checks and reports every problem at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial

from omegaconf import DictConfig
from verl.trainer.config import (
    ActorConfig,
    ActorRolloutRefConfig,
    AlgoConfig,
    PPOTrainerConfig,
    load_config,
)
from verl.trainer.recipe_runner import validate_with

from verl_recipe_sppo.algos import SPPO_BASELINES

SPPO_ESTIMATORS = ("sppo", "sppo_win_rate")


@dataclass
class SPPOActorConfig(ActorConfig):
    sppo_eta: float = "${algorithm.sppo_eta}"  # type: ignore[assignment]  # an interpolation


@dataclass
class SPPOActorRolloutRefConfig(ActorRolloutRefConfig):
    actor: SPPOActorConfig = field(default_factory=SPPOActorConfig)


@dataclass
class SPPOAlgorithmConfig(AlgoConfig):
    sppo_eta: float = 1.0
    sppo_baseline: str = "batch"


@dataclass
class SPPOTrainerConfig(PPOTrainerConfig):
    """Core's root config with the SPPO sections."""

    actor_rollout_ref: SPPOActorRolloutRefConfig = field(default_factory=SPPOActorRolloutRefConfig)
    algorithm: SPPOAlgorithmConfig = field(default_factory=SPPOAlgorithmConfig)


#: Core's loader over the SPPO schema (core defaults < ``--config`` files < ``key=value``).
load_sppo_config = partial(load_config, schema=SPPOTrainerConfig)


def sppo_problems(cfg: DictConfig) -> list[str]:
    """What SPPO needs beyond core's checks, each problem in the user's terms."""
    problems: list[str] = []
    algo, actor = cfg.algorithm, cfg.actor_rollout_ref.actor
    if algo.adv_estimator not in SPPO_ESTIMATORS:
        problems.append(
            f"algorithm.adv_estimator={algo.adv_estimator!r}: SPPO's target is a group win rate; use "
            f"{' or '.join(SPPO_ESTIMATORS)} (upstream's softmean estimate, or the paper's P_hat - 1/2)"
        )
    if actor.policy_loss.loss_mode != "sppo":
        problems.append(
            f"actor_rollout_ref.actor.policy_loss.loss_mode={actor.policy_loss.loss_mode!r}: SPPO trains with "
            "its squared log-ratio loss; set it to sppo"
        )
    for key, value in (
        ("algorithm.sppo_eta", algo.sppo_eta),
        ("actor_rollout_ref.actor.sppo_eta", actor.sppo_eta),
    ):
        if not float(value) > 0:
            problems.append(f"{key}={value} must be > 0")
    n = int(cfg.actor_rollout_ref.rollout.n)
    if algo.sppo_baseline not in SPPO_BASELINES:
        problems.append(
            f"algorithm.sppo_baseline={algo.sppo_baseline!r} is not one of: {', '.join(SPPO_BASELINES)}"
        )
    elif algo.adv_estimator == "sppo" and algo.sppo_baseline == "group" and n < 2:
        problems.append(
            f"algorithm.sppo_baseline=group compares the answers to one prompt with each other, but "
            f"actor_rollout_ref.rollout.n={n}; set rollout.n >= 2, or sppo_baseline=batch (upstream's)"
        )
    elif algo.adv_estimator == "sppo_win_rate" and algo.sppo_baseline == "group":
        problems.append(
            "algorithm.sppo_baseline=group: the baseline belongs to adv_estimator=sppo; sppo_win_rate "
            "compares each prompt's answers with each other; leave sppo_baseline at batch"
        )
    if algo.adv_estimator == "sppo_win_rate" and n < 2:
        problems.append(
            f"algorithm.adv_estimator=sppo_win_rate compares the answers to one prompt with each other, but "
            f"actor_rollout_ref.rollout.n={n}; set rollout.n >= 2"
        )
    if cfg.critic.enable:
        problems.append("critic.enable=true: SPPO has no value model; set critic.enable=false (or null)")
    return problems


#: Core's validation plus `sppo_problems`, in one `ConfigError`; the config is read-only after.
validate_sppo_config = validate_with(sppo_problems)
