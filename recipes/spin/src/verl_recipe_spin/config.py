"""SPIN's config: core's typed schema plus the recipe's keys, loaded and validated once.

The recipe extends core's dataclasses instead of copying them (``load_config(schema=...)``): every core
key keeps its type, default and validation, and the new keys are typed too, so an unknown or mistyped
key is still an error before anything starts. Keys (upstream's names where upstream has them):

- ``algorithm.dpo_beta`` (0.1) and ``algorithm.dpo_loss_type`` (``sigmoid`` | ``ipo``): the DPO loss;
  ``actor_rollout_ref.actor.dpo_beta`` / ``.dpo_loss_type`` default to them (the worker only sees the
  actor section, where the loss reads them);
- ``trainer.ref_update_freq`` (-1): every that many steps the reference takes the actor's weights, at
  the start of the step (<= 0: never, the reference stays the initial model);
- ``algorithm.spin_mode`` (``reward`` | ``sft``) and ``algorithm.spin_target_key``
  (``reward_model.ground_truth``): how pairs are picked (``verl_recipe_spin.pairs``); new here;
- ``algorithm.spin_ties`` (``first_chosen`` | ``drop``): a tied pair of ``spin_mode=reward``.
  ``first_chosen`` (upstream): the pair's first row is chosen and the pair trains; ``drop``: the pair
  carries no preference and trains nothing;
- ``algorithm.spin_update`` (``one_step`` | ``mini_batches``): ``one_step`` (upstream): the whole batch's
  gradients are accumulated into one optimizer step, so ``actor.ppo_mini_batch_size`` must equal
  ``data.train_batch_size`` and ``actor.ppo_epochs`` be 1 (refused otherwise, naming this key);
  ``mini_batches``: core's update, one optimizer step per ``ppo_mini_batch_size`` pairs and epoch.

`validate_spin_config` adds what SPIN needs to core's checks and reports every problem at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import ClassVar

from omegaconf import DictConfig
from verl.trainer.config import (
    ActorConfig,
    ActorRolloutRefConfig,
    AlgoConfig,
    PPOTrainerConfig,
    RefConfig,
    TrainerConfig,
    load_config,
    world_size,
)
from verl.trainer.recipe_runner import validate_with

from verl_recipe_spin.algos import DPO_LOSS_TYPES, SPIN_MODES, SPIN_TIES

SPIN_UPDATES = ("one_step", "mini_batches")


@dataclass
class SPINActorConfig(ActorConfig):
    dpo_beta: float = "${algorithm.dpo_beta}"  # type: ignore[assignment]  # interpolations
    dpo_loss_type: str = "${algorithm.dpo_loss_type}"


@dataclass
class SPINRefConfig(RefConfig):
    READ_WHEN: ClassVar[None] = None  # the DPO loss needs the reference whatever the KL keys say


@dataclass
class SPINActorRolloutRefConfig(ActorRolloutRefConfig):
    actor: SPINActorConfig = field(default_factory=SPINActorConfig)
    ref: SPINRefConfig = field(default_factory=SPINRefConfig)


@dataclass
class SPINAlgorithmConfig(AlgoConfig):
    dpo_beta: float = 0.1
    dpo_loss_type: str = "sigmoid"
    spin_mode: str = "reward"
    spin_target_key: str = "reward_model.ground_truth"
    spin_ties: str = "first_chosen"
    spin_update: str = "one_step"


@dataclass
class SPINTrainerSectionConfig(TrainerConfig):
    ref_update_freq: int = -1


@dataclass
class SPINTrainerConfig(PPOTrainerConfig):
    """Core's root config with the SPIN sections."""

    actor_rollout_ref: SPINActorRolloutRefConfig = field(default_factory=SPINActorRolloutRefConfig)
    algorithm: SPINAlgorithmConfig = field(default_factory=SPINAlgorithmConfig)
    trainer: SPINTrainerSectionConfig = field(default_factory=SPINTrainerSectionConfig)


#: Core's loader over the SPIN schema (core defaults < ``--config`` files < ``key=value``).
load_spin_config = partial(load_config, schema=SPINTrainerConfig)


def spin_problems(cfg: DictConfig) -> list[str]:
    """What SPIN needs beyond core's checks, each problem in the user's terms."""
    problems: list[str] = []
    algo, actor, rollout = cfg.algorithm, cfg.actor_rollout_ref.actor, cfg.actor_rollout_ref.rollout
    if algo.adv_estimator != "spin":
        problems.append(
            f"algorithm.adv_estimator={algo.adv_estimator!r}: SPIN labels its pairs with the spin "
            "estimator; set it to spin"
        )
    if actor.policy_loss.loss_mode != "dpo":
        problems.append(
            f"actor_rollout_ref.actor.policy_loss.loss_mode={actor.policy_loss.loss_mode!r}: SPIN trains "
            "with the DPO loss; set it to dpo"
        )
    for where, section in (("algorithm", algo), ("actor_rollout_ref.actor", actor)):
        if not float(section.dpo_beta) > 0:
            problems.append(f"{where}.dpo_beta={section.dpo_beta} must be > 0")
        if section.dpo_loss_type not in DPO_LOSS_TYPES:
            problems.append(
                f"{where}.dpo_loss_type={section.dpo_loss_type!r} is not one of: {', '.join(DPO_LOSS_TYPES)}"
            )
    n = int(rollout.n)
    if algo.spin_mode not in SPIN_MODES:
        problems.append(f"algorithm.spin_mode={algo.spin_mode!r} is not one of: {', '.join(SPIN_MODES)}")
    elif algo.spin_mode == "reward" and n < 2:
        problems.append(
            "algorithm.spin_mode=reward picks the best and worst of rollout.n answers; "
            f"actor_rollout_ref.rollout.n={n} must be >= 2"
        )
    elif algo.spin_mode == "sft":
        if n != 1:
            problems.append(
                "algorithm.spin_mode=sft pairs the target with one own answer; "
                f"set actor_rollout_ref.rollout.n=1 (got {n})"
            )
        if actor.use_rollout_log_probs:
            problems.append(
                "algorithm.spin_mode=sft: the target rows were not sampled, so they have no rollout "
                "log-probs; set actor_rollout_ref.actor.use_rollout_log_probs=false"
            )
    if algo.spin_ties not in SPIN_TIES:
        problems.append(f"algorithm.spin_ties={algo.spin_ties!r} is not one of: {', '.join(SPIN_TIES)}")
    elif algo.spin_ties == "drop" and algo.spin_mode == "sft":
        problems.append(
            "algorithm.spin_ties=drop: spin_mode=sft always prefers the target, so no pair is a tie; "
            "use it with spin_mode=reward or leave it at first_chosen"
        )
    if algo.spin_update not in SPIN_UPDATES:
        problems.append(f"algorithm.spin_update={algo.spin_update!r} is not one of: {', '.join(SPIN_UPDATES)}")
    elif algo.spin_update == "one_step":
        batch, mini = int(cfg.data.train_batch_size), int(actor.ppo_mini_batch_size)
        if mini != batch or int(actor.ppo_epochs) != 1:
            problems.append(
                "algorithm.spin_update=one_step takes one optimizer step per batch (upstream: the batch's "
                f"gradients accumulated), but actor_rollout_ref.actor.ppo_mini_batch_size={mini} with "
                f"data.train_batch_size={batch} and actor_rollout_ref.actor.ppo_epochs={actor.ppo_epochs} make "
                f"{-(-batch // mini) * int(actor.ppo_epochs)} steps; set ppo_mini_batch_size={batch} and "
                "ppo_epochs=1, or algorithm.spin_update=mini_batches"
            )
    if cfg.trainer.balance_batch:
        problems.append(
            "trainer.balance_batch=true reorders rows across workers, which separates SPIN's "
            "(chosen, rejected) pairs; set it to false"
        )
    if actor.use_dynamic_bsz and cfg.actor_rollout_ref.model.use_remove_padding:
        problems.append(
            "actor_rollout_ref.actor.use_dynamic_bsz=true with model.use_remove_padding packs micro-batches by a "
            "token budget, which regroups rows freely and separates SPIN's (chosen, rejected) pairs (the worker "
            "refuses it at the first update); set it to false"
        )
    if algo.use_kl_in_reward:
        problems.append(
            "algorithm.use_kl_in_reward=true: SPIN's pairs come from the rule reward and the KL is the "
            "DPO loss's own; set it to false"
        )
    if cfg.critic.enable:
        problems.append("critic.enable=true: SPIN has no value model; set critic.enable=false (or null)")
    problems += _pair_size_problems(cfg)
    return problems


def _pair_size_problems(cfg: DictConfig) -> list[str]:
    """Sizes in pairs: core's checks count rollout.n rows per prompt, the update sees 2 (a pair)."""
    problems: list[str] = []
    ws = world_size(cfg)
    actor = cfg.actor_rollout_ref.actor
    for key, prompts in (
        ("data.train_batch_size", cfg.data.train_batch_size),
        ("actor_rollout_ref.actor.ppo_mini_batch_size", actor.ppo_mini_batch_size),
    ):
        if int(prompts) % ws:
            problems.append(
                f"{key}={prompts} prompts: every one of the {ws} workers must get whole (chosen, rejected) "
                f"pairs; use a multiple of {ws}"
            )
    micro = actor.ppo_micro_batch_size_per_gpu
    if not actor.use_dynamic_bsz and micro is not None and int(actor.ppo_mini_batch_size) % ws == 0:
        rows = 2 * int(actor.ppo_mini_batch_size) // ws
        if int(micro) % 2 or rows % int(micro):
            problems.append(
                f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={micro}: a mini-batch is "
                f"{actor.ppo_mini_batch_size} pairs = {rows} rows per worker; the micro-batch must be an even "
                f"divisor of {rows} (whole pairs)"
            )
    return problems


#: Core's validation plus `spin_problems`, in one `ConfigError`; the config is read-only after.
validate_spin_config = validate_with(spin_problems)
