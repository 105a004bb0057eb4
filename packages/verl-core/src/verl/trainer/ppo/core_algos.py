"""The math of the PPO family: advantage estimators, policy losses, value/entropy losses, KL, aggregation.

Pure torch (and numpy) functions; no Ray, no workers. Upstream verl's names and signatures; the code
lives in sibling modules and is re-exported here, so ``from verl.trainer.ppo import core_algos`` is all a
user or recipe needs:

- ``advantages``: ``AdvantageEstimator``, ``register_adv_est``, ``get_adv_estimator_fn`` and the
  estimators ``gae``, ``grpo``, ``grpo_vectorized``, ``grpo_passk``, ``rloo``, ``rloo_vectorized``,
  ``opo``, ``gpg``, ``reinforce_plus_plus``, ``reinforce_plus_plus_baseline``, ``remax``. Uniform call (every estimator accepts it)::

      adv, ret = get_adv_estimator_fn(name)(
          token_level_rewards=..., response_mask=..., index=uids, config=algorithm_cfg,
          values=values_or_None, reward_baselines=baselines_or_None)

  ``config`` supplies ``gamma``, ``lam``, ``norm_adv_by_std_in_grpo`` by attribute; groups are given by
  ``index`` (the ``uid`` array); a group of one gets advantage 0; outputs are zero outside the mask.
- ``policy_losses``: ``register_policy_loss``, ``get_policy_loss_fn``, ``PolicyLossConfig`` and the
  losses ``vanilla``, ``gspo``, ``gpg``, ``clip_cov``, ``kl_cov``, ``geo_mean``, ``cispo``, ``dro`` and
  (``dppo``) ``dppo_tv``, ``dppo_kl`` with the one
  signature ``(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean",
  config=None, rollout_is_weights=None, global_batch_info=None) -> (pg_loss, metrics)``.
- ``loss_agg``: ``agg_loss`` and ``GlobalBatchInfo`` (how a worker keeps the loss independent of the
  number of workers and micro-batches is described there). ``agg_loss`` and ``compute_value_loss``
  take upstream's ``dp_size, batch_num_tokens, global_batch_size, loss_scale_factor`` or our
  keyword-only ``global_batch_info``.
- The registries ``ADV_ESTIMATOR_REGISTRY`` / ``POLICY_LOSS_REGISTRY`` are mappings like upstream's
  dicts. ``register_adv_est`` / ``register_policy_loss`` / ``get_adv_estimator_fn`` /
  ``get_policy_loss_fn`` use the mapping this module holds under that name when they are called (code
  written for upstream may swap in a plain dict). Registering the same function again under its name is
  a no-op; another function under a taken name is a ``ValueError`` ("... has already been registered");
  an unknown name raises ``UnknownNameError`` (a ValueError as upstream, and a KeyError) with upstream's
  wording ("Unknown advantage estimator simply: <name>", "Unsupported loss mode: <name>. Supported modes
  are: [...]") and a did-you-mean.
- ``distillation_losses``: the divergences of on-policy distillation (``distillation.distillation_loss.loss_mode``):
  ``DISTILLATION_LOSS_REGISTRY``, ``register_distillation_loss``, ``get_distillation_loss_fn``,
  ``get_distillation_loss_settings``.
- ``kl``: ``kl_penalty``, ``FixedKLController``, ``AdaptiveKLController``, ``get_kl_controller``,
  ``compute_kl_in_reward``.
- for a recipe's own estimators and losses: ``check_loss_inputs`` (the four inputs share one shape) and
  ``recipe_config_key`` (a key only the recipe's schema has, or an error naming its entry point).
- here: ``compute_value_loss``, ``compute_entropy_loss``; from ``verl.utils.torch_functional``:
  ``entropy_from_logits``, ``masked_mean``, ``masked_sum``, ``masked_var``, ``masked_whiten``.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, MutableMapping
from enum import Enum
from typing import Any

import torch

from verl.trainer.ppo.advantages import (
    ADV_ESTIMATOR_REGISTRY,
    AdvantageEstimator,
    compute_gae_advantage_return,
    compute_gpg_outcome_advantage,
    compute_grpo_outcome_advantage,
    compute_grpo_passk_outcome_advantage,
    compute_grpo_vectorized_outcome_advantage,
    compute_opo_outcome_advantage,
    compute_reinforce_plus_plus_baseline_outcome_advantage,
    compute_reinforce_plus_plus_outcome_advantage,
    compute_remax_outcome_advantage,
    compute_rloo_outcome_advantage,
    compute_rloo_vectorized_outcome_advantage,
    recipe_config_key,
)
from verl.trainer.ppo.distillation_losses import (
    DISTILLATION_LOSS_REGISTRY,
    get_distillation_loss_fn,
    get_distillation_loss_settings,
    register_distillation_loss,
)
from verl.trainer.ppo.dppo import compute_policy_loss_dppo_kl, compute_policy_loss_dppo_tv
from verl.trainer.ppo.kl import (
    KL_PENALTY_TYPES,
    AdaptiveKLController,
    FixedKLController,
    compute_kl_in_reward,
    get_kl_controller,
    kl_penalty,
)
from verl.trainer.ppo.loss_agg import LOSS_AGG_MODES, GlobalBatchInfo, agg_loss
from verl.trainer.ppo.policy_losses import (
    POLICY_LOSS_REGISTRY,
    PolicyLossConfig,
    check_loss_inputs,
    compute_policy_loss_cispo,
    compute_policy_loss_clip_cov,
    compute_policy_loss_dro,
    compute_policy_loss_geo_mean,
    compute_policy_loss_gpg,
    compute_policy_loss_gspo,
    compute_policy_loss_kl_cov,
    compute_policy_loss_vanilla,
)
from verl.utils.registry import UnknownNameError
from verl.utils.torch_functional import (
    clip_by_value,
    entropy_from_logits,
    masked_mean,
    masked_sum,
    masked_var,
    masked_whiten,
)

__all__ = [
    "ADV_ESTIMATOR_REGISTRY",
    "KL_PENALTY_TYPES",
    "LOSS_AGG_MODES",
    "DISTILLATION_LOSS_REGISTRY",
    "POLICY_LOSS_REGISTRY",
    "AdaptiveKLController",
    "AdvantageEstimator",
    "FixedKLController",
    "GlobalBatchInfo",
    "PolicyLossConfig",
    "agg_loss",
    "check_loss_inputs",
    "compute_entropy_loss",
    "compute_gae_advantage_return",
    "compute_gpg_outcome_advantage",
    "compute_grpo_outcome_advantage",
    "compute_grpo_passk_outcome_advantage",
    "compute_grpo_vectorized_outcome_advantage",
    "compute_kl_in_reward",
    "compute_opo_outcome_advantage",
    "compute_policy_loss_cispo",
    "compute_policy_loss_clip_cov",
    "compute_policy_loss_dppo_kl",
    "compute_policy_loss_dppo_tv",
    "compute_policy_loss_dro",
    "compute_policy_loss_geo_mean",
    "compute_policy_loss_gpg",
    "compute_policy_loss_gspo",
    "compute_policy_loss_kl_cov",
    "compute_policy_loss_vanilla",
    "compute_reinforce_plus_plus_baseline_outcome_advantage",
    "compute_reinforce_plus_plus_outcome_advantage",
    "compute_remax_outcome_advantage",
    "compute_rloo_outcome_advantage",
    "compute_rloo_vectorized_outcome_advantage",
    "compute_value_loss",
    "entropy_from_logits",
    "get_adv_estimator_fn",
    "get_distillation_loss_fn",
    "get_distillation_loss_settings",
    "get_kl_controller",
    "get_policy_loss_fn",
    "kl_penalty",
    "masked_mean",
    "masked_sum",
    "masked_var",
    "masked_whiten",
    "recipe_config_key",
    "register_adv_est",
    "register_distillation_loss",
    "register_policy_loss",
]


# ---------------------------------------------------------------- the registries' public functions
def _name(name_or_enum: Any) -> str:
    return name_or_enum.value if isinstance(name_or_enum, Enum) else str(name_or_enum)


def _describe(obj: Any) -> str:
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', type(obj).__name__)}"


def _add(registry: MutableMapping, name: str, fn: Callable, kind: str) -> Callable:
    if name in registry and registry[name] is not fn:
        raise ValueError(
            f"{kind} {name} has already been registered: {_describe(registry[name])} vs {_describe(fn)}; "
            "pick another name"
        )
    registry[name] = fn
    return fn


def _did_you_mean(name: str, known: list[str]) -> str:
    close = difflib.get_close_matches(name, known, n=1)
    return f". Did you mean {close[0]!r}?" if close else ""


def register_adv_est(name_or_enum: str | AdvantageEstimator) -> Callable[[Callable], Callable]:
    """Decorator: register an advantage estimator under a name or an `AdvantageEstimator` (module doc)."""
    return lambda fn: _add(ADV_ESTIMATOR_REGISTRY, _name(name_or_enum), fn, "Adv estimator")


def get_adv_estimator_fn(
    name_or_enum: str | AdvantageEstimator,
) -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    """The estimator registered under ``name_or_enum`` (module doc)."""
    name, registry = _name(name_or_enum), ADV_ESTIMATOR_REGISTRY
    if name not in registry:
        known = sorted(registry)
        raise UnknownNameError(
            f"Unknown advantage estimator simply: {name}; known: {', '.join(known)}{_did_you_mean(name, known)}"
        )
    return registry[name]


def register_policy_loss(name: str) -> Callable[[Callable], Callable]:
    """Decorator: register a policy loss under ``name`` (``actor.policy_loss.loss_mode``; module doc)."""
    return lambda fn: _add(POLICY_LOSS_REGISTRY, str(name), fn, "Policy loss")


def get_policy_loss_fn(name: str) -> Callable[..., tuple[torch.Tensor, dict[str, float]]]:
    """The policy loss registered under ``name`` (module doc)."""
    registry = POLICY_LOSS_REGISTRY
    if name not in registry:
        known = sorted(registry)
        raise UnknownNameError(
            f"Unsupported loss mode: {name}. Supported modes are: {known}{_did_you_mean(str(name), known)}"
        )
    return registry[name]


def compute_value_loss(
    vpreds: torch.Tensor,
    returns: torch.Tensor,
    values: torch.Tensor,
    response_mask: torch.Tensor,
    cliprange_value: float,
    loss_agg_mode: str = "token-mean",
    dp_size: int = 1,
    batch_num_tokens: float | torch.Tensor | None = None,
    global_batch_size: float | torch.Tensor | None = None,
    loss_scale_factor: float | None = None,
    *,
    global_batch_info: GlobalBatchInfo | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Clipped value loss: 0.5 * agg(max((V - R)^2, (clip(V, V_old - c, V_old + c) - R)^2)).

    ``values`` are the critic's predictions at rollout time (V_old). Returns ``(vf_loss, vf_clipfrac)``
    where the clip fraction is the share of valid tokens whose clipped error was the larger one. The
    aggregation takes either upstream's ``dp_size``/``batch_num_tokens``/``global_batch_size``/
    ``loss_scale_factor`` or our ``global_batch_info`` (see ``agg_loss``).
    """
    vpreds_clipped = clip_by_value(vpreds, values - cliprange_value, values + cliprange_value)
    err_unclipped = (vpreds - returns) ** 2
    err_clipped = (vpreds_clipped - returns) ** 2
    vf_loss = 0.5 * agg_loss(
        torch.maximum(err_unclipped, err_clipped),
        response_mask,
        loss_agg_mode,
        dp_size,
        batch_num_tokens,
        global_batch_size,
        loss_scale_factor,
        global_batch_info=global_batch_info,
    )
    vf_clipfrac = masked_mean((err_clipped > err_unclipped).float(), response_mask)
    return vf_loss, vf_clipfrac


def compute_entropy_loss(
    logits: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    *,
    global_batch_info: GlobalBatchInfo | None = None,
) -> torch.Tensor:
    """Aggregated token entropy of ``logits`` [B, T, V] over the valid tokens of ``response_mask`` [B, T]."""
    return agg_loss(
        entropy_from_logits(logits), response_mask, loss_agg_mode, global_batch_info=global_batch_info
    )
