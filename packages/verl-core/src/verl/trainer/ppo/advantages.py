"""Advantage estimators and their registry (re-exported by ``verl.trainer.ppo.core_algos``).

Uniform calling convention
--------------------------
Every registered estimator can be called with the same keywords::

    advantages, returns = fn(
        token_level_rewards=...,  # [B, T] float, reward per response token (outcome reward on the last one)
        response_mask=...,        # [B, T] 0/1, 1 on generated tokens
        index=...,                # length-B array of group ids (the prompt ``uid``; numpy object array of str)
        config=...,               # object with attributes gamma, lam, norm_adv_by_std_in_grpo (e.g. ``algorithm``)
        values=...,               # [B, T] critic values (gae only)
        reward_baselines=...,     # [B] reward of a greedy rollout per row (remax only)
    )

An estimator ignores keywords it does not use (``**kwargs``). Explicit scalar keywords (``gamma``,
``lam``, ``norm_adv_by_std_in_grpo``) win over ``config``; without either, upstream defaults apply
where upstream has one (``norm_adv_by_std_in_grpo=True``, ``gamma=1.0`` for REINFORCE++).

Both outputs are ``[B, T]`` and zero outside ``response_mask``. Group estimators treat a group of one
sample as having no baseline information: its advantage is 0 (upstream would give the raw score).
Groups whose rewards are all equal get advantage 0; nothing is ever NaN.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from enum import Enum, StrEnum
from typing import Any

import numpy as np
import torch

from verl.utils import torch_functional as verl_F
from verl.utils.registry import Registry


class AdvantageEstimator(StrEnum):
    """Names of the built-in estimators (``algorithm.adv_estimator``)."""

    GAE = "gae"
    GRPO = "grpo"
    REINFORCE_PLUS_PLUS = "reinforce_plus_plus"
    REINFORCE_PLUS_PLUS_BASELINE = "reinforce_plus_plus_baseline"
    REMAX = "remax"
    RLOO = "rloo"
    OPO = "opo"
    GRPO_PASSK = "grpo_passk"
    GPG = "gpg"
    RLOO_VECTORIZED = "rloo_vectorized"
    GRPO_VECTORIZED = "grpo_vectorized"


ADV_ESTIMATOR_REGISTRY: Registry[Callable[..., tuple[torch.Tensor, torch.Tensor]]] = Registry(
    "advantage estimator"
)


def _key(name: str | AdvantageEstimator) -> str:
    return name.value if isinstance(name, Enum) else str(name)


def register_adv_est(name: str | AdvantageEstimator) -> Callable:
    """Decorator: register an estimator under ``name`` (a str or an ``AdvantageEstimator``)."""
    return ADV_ESTIMATOR_REGISTRY.register(_key(name))


def get_adv_estimator_fn(name: str | AdvantageEstimator) -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    """The estimator registered under ``name``; an unknown name raises `UnknownNameError` (a ValueError,
    as upstream, and a KeyError) listing the known ones."""
    return ADV_ESTIMATOR_REGISTRY.get(_key(name))


# ---------------------------------------------------------------- helpers


def _from_config(explicit: Any, config: Any, key: str, default: Any, estimator: str) -> Any:
    """Explicit keyword > ``config.<key>`` > default (None default means the value is required)."""
    if explicit is not None:
        return explicit
    if config is not None:
        return getattr(config, key)
    if default is None:
        raise ValueError(f"{estimator} needs {key}: pass {key}=... or a config with attribute {key!r}")
    return default


def recipe_config_key(config: Any, key: str, section: str, user: str, command: str) -> Any:
    """``config.<key>`` for a recipe's estimator or loss (``user``, e.g. ``"policy loss 'dpo'"``): a config
    without the key (core's schema, not the recipe's) is a KeyError naming ``section.key`` and the recipe's
    ``command``, whose schema adds it."""
    try:
        return getattr(config, key)
    except AttributeError as e:  # omegaconf's missing-key error is an AttributeError too
        raise KeyError(
            f"{user} reads {section}.{key}, which this config does not have: run it through the recipe's "
            f"entry point ({command}), whose schema adds the key"
        ) from e


def _group_ids(
    index: Sequence | np.ndarray | torch.Tensor | None, batch: int, estimator: str
) -> torch.Tensor:
    """Map an array of group ids (any hashable values) to dense integer ids 0..G-1 in first-seen order."""
    if index is None:
        raise ValueError(f"{estimator} needs index: the group id (prompt uid) of each of the {batch} rows")
    if isinstance(index, torch.Tensor):
        index = index.tolist()
    if len(index) != batch:
        raise ValueError(f"{estimator}: index has {len(index)} entries but the batch has {batch} rows")
    dense: dict[Any, int] = {}
    return torch.tensor([dense.setdefault(k, len(dense)) for k in index], dtype=torch.long)


def _outcome_scores(token_level_rewards: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """One scalar per row: the sum of its rewards over valid tokens."""
    return (token_level_rewards * response_mask).sum(dim=-1)


def _group_stats(scores: torch.Tensor, gid: torch.Tensor, weights: torch.Tensor | None = None):
    """Per-row group size, (weighted) group mean and unbiased group std (0 for groups of one)."""
    num_groups = int(gid.max().item()) + 1 if gid.numel() else 0
    w = torch.ones_like(scores) if weights is None else weights.to(scores.dtype)
    count = torch.zeros(num_groups, dtype=scores.dtype).index_add_(0, gid, torch.ones_like(scores))
    wsum = torch.zeros(num_groups, dtype=scores.dtype).index_add_(0, gid, w)
    mean = torch.zeros(num_groups, dtype=scores.dtype).index_add_(0, gid, w * scores) / wsum.clamp(min=1e-12)
    plain_mean = torch.zeros(num_groups, dtype=scores.dtype).index_add_(0, gid, scores) / count
    sq = torch.zeros(num_groups, dtype=scores.dtype).index_add_(0, gid, (scores - plain_mean[gid]) ** 2)
    std = torch.sqrt(sq / (count - 1).clamp(min=1))
    return count[gid], mean[gid], std[gid]


def _check_shapes(token_level_rewards: torch.Tensor, response_mask: torch.Tensor, estimator: str) -> None:
    if token_level_rewards.shape != response_mask.shape or token_level_rewards.dim() != 2:
        raise ValueError(
            f"{estimator}: token_level_rewards {tuple(token_level_rewards.shape)} and response_mask "
            f"{tuple(response_mask.shape)} must both be [batch, response_length]"
        )


# ---------------------------------------------------------------- estimators


@register_adv_est(AdvantageEstimator.GAE)
@torch.no_grad()
def compute_gae_advantage_return(
    token_level_rewards: torch.Tensor,
    values: torch.Tensor,
    response_mask: torch.Tensor,
    gamma: float | None = None,
    lam: float | None = None,
    config: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised Advantage Estimation with a critic baseline.

    delta_t = r_t + gamma * V_{t+1} - V_t and A_t = delta_t + gamma * lam * A_{t+1}, over valid tokens
    only: a masked token (padding, or a tool-output span inside a multi-turn response) is skipped, so
    the next valid token's value and advantage carry across it. Returns are A + V (before whitening);
    the advantages are whitened over the valid tokens of the batch.
    """
    _check_shapes(token_level_rewards, response_mask, "gae")
    gamma = _from_config(gamma, config, "gamma", None, "gae")
    lam = _from_config(lam, config, "lam", None, "gae")
    mask = response_mask.to(values.dtype)
    rewards = token_level_rewards.to(values.dtype)
    length = rewards.shape[-1]
    next_value = torch.zeros_like(values[:, 0])
    next_adv = torch.zeros_like(values[:, 0])
    adv = torch.zeros_like(values)
    for t in reversed(range(length)):
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        adv_t = delta + gamma * lam * next_adv
        m = mask[:, t]
        adv[:, t] = adv_t
        # skip masked positions: keep carrying the values from the next valid token
        next_value = m * values[:, t] + (1 - m) * next_value
        next_adv = m * adv_t + (1 - m) * next_adv
    returns = (adv + values) * mask
    advantages = verl_F.masked_whiten(adv, mask) * mask
    return advantages, returns


@register_adv_est(AdvantageEstimator.GRPO)
@torch.no_grad()
def compute_grpo_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Sequence | np.ndarray | None = None,
    epsilon: float = 1e-6,
    norm_adv_by_std_in_grpo: bool | None = None,
    config: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO: (score - group mean) / (group std + epsilon), broadcast over the response.

    ``norm_adv_by_std_in_grpo=False`` skips the division (Dr.GRPO). None reads
    ``config.norm_adv_by_std_in_grpo`` (or True without a config). Std is the unbiased sample std.
    """
    _check_shapes(token_level_rewards, response_mask, "grpo")
    norm = _from_config(norm_adv_by_std_in_grpo, config, "norm_adv_by_std_in_grpo", True, "grpo")
    scores = _outcome_scores(token_level_rewards, response_mask)
    gid = _group_ids(index, scores.shape[0], "grpo")
    count, mean, std = _group_stats(scores, gid)
    adv = scores - mean
    if norm:
        adv = adv / (std + epsilon)
    adv = torch.where(count > 1, adv, torch.zeros_like(adv))
    adv = adv.unsqueeze(-1) * response_mask
    return adv, adv


@register_adv_est(AdvantageEstimator.GRPO_PASSK)
@torch.no_grad()
def compute_grpo_passk_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Sequence | np.ndarray | None = None,
    epsilon: float = 1e-6,
    norm_adv_by_std_in_grpo: bool | None = None,
    config: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pass@k GRPO: only the best response of each group is credited, with (best - second best),
    divided by (group std + epsilon) unless ``norm_adv_by_std_in_grpo`` is False. Ties go to the
    first row; every other row gets 0 (a group of one gets 0)."""
    _check_shapes(token_level_rewards, response_mask, "grpo_passk")
    norm = _from_config(norm_adv_by_std_in_grpo, config, "norm_adv_by_std_in_grpo", True, "grpo_passk")
    scores = _outcome_scores(token_level_rewards, response_mask)
    gid = _group_ids(index, scores.shape[0], "grpo_passk")
    _, _, std = _group_stats(scores, gid)
    adv = torch.zeros_like(scores)
    for g in range(int(gid.max().item()) + 1 if gid.numel() else 0):
        rows = torch.nonzero(gid == g).squeeze(-1)
        if rows.numel() < 2:
            continue
        group = scores[rows]
        order = torch.sort(group, descending=True, stable=True).indices
        best, second = group[order[0]], group[order[1]]
        gap = best - second
        if norm:
            gap = gap / (std[rows[0]] + epsilon)
        adv[rows[order[0]]] = gap
    adv = adv.unsqueeze(-1) * response_mask
    return adv, adv


@register_adv_est(AdvantageEstimator.RLOO)
@torch.no_grad()
def compute_rloo_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Sequence | np.ndarray | None = None,
    epsilon: float = 1e-6,
    config: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """RLOO: score minus the mean score of the *other* samples of the group."""
    _check_shapes(token_level_rewards, response_mask, "rloo")
    scores = _outcome_scores(token_level_rewards, response_mask)
    gid = _group_ids(index, scores.shape[0], "rloo")
    count, mean, _ = _group_stats(scores, gid)
    # mean of the others = (n * mean - s) / (n - 1); s - that = n / (n - 1) * (s - mean)
    adv = torch.where(count > 1, count / (count - 1).clamp(min=1) * (scores - mean), torch.zeros_like(scores))
    adv = adv.unsqueeze(-1) * response_mask
    return adv, adv


@register_adv_est(AdvantageEstimator.GRPO_VECTORIZED)
def compute_grpo_vectorized_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Sequence | np.ndarray | None = None,
    epsilon: float = 1e-6,
    norm_adv_by_std_in_grpo: bool | None = None,
    config: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Upstream's name for the group-vectorised GRPO. Our ``grpo`` is already computed with scatter
    adds over all groups at once (no per-group Python loop), so this is the same computation."""
    return compute_grpo_outcome_advantage(
        token_level_rewards=token_level_rewards, response_mask=response_mask, index=index, epsilon=epsilon,
        norm_adv_by_std_in_grpo=norm_adv_by_std_in_grpo, config=config,
    )


@register_adv_est(AdvantageEstimator.RLOO_VECTORIZED)
def compute_rloo_vectorized_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Sequence | np.ndarray | None = None,
    epsilon: float = 1e-6,
    config: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Upstream's name for the group-vectorised RLOO; the same computation as our (vectorised) ``rloo``."""
    return compute_rloo_outcome_advantage(
        token_level_rewards=token_level_rewards, response_mask=response_mask, index=index, epsilon=epsilon,
        config=config,
    )


@register_adv_est(AdvantageEstimator.OPO)
@torch.no_grad()
def compute_opo_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Sequence | np.ndarray | None = None,
    epsilon: float = 1e-6,
    config: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """OPO: score minus the length-weighted group mean sum(len_j * s_j) / sum(len_j) (own row included)."""
    _check_shapes(token_level_rewards, response_mask, "opo")
    scores = _outcome_scores(token_level_rewards, response_mask)
    gid = _group_ids(index, scores.shape[0], "opo")
    lengths = response_mask.to(scores.dtype).sum(dim=-1)
    count, wmean, _ = _group_stats(scores, gid, weights=lengths)
    adv = torch.where(count > 1, scores - wmean, torch.zeros_like(scores))
    adv = adv.unsqueeze(-1) * response_mask
    return adv, adv


@register_adv_est(AdvantageEstimator.GPG)
@torch.no_grad()
def compute_gpg_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Sequence | np.ndarray | None = None,
    epsilon: float = 1e-6,
    f_norm: float = 1.0,
    alpha: float | None = None,
    config: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GPG: alpha * (score - group mean) / f_norm, with alpha = batch size / number of rows whose
    score is non-zero (at least 1), correcting for the rows that carry no learning signal."""
    _check_shapes(token_level_rewards, response_mask, "gpg")
    scores = _outcome_scores(token_level_rewards, response_mask)
    gid = _group_ids(index, scores.shape[0], "gpg")
    count, mean, _ = _group_stats(scores, gid)
    if alpha is None:
        alpha = scores.shape[0] / max(int(torch.count_nonzero(scores).item()), 1)
    adv = torch.where(count > 1, alpha * (scores - mean) / f_norm, torch.zeros_like(scores))
    adv = adv.unsqueeze(-1) * response_mask
    return adv, adv


@register_adv_est(AdvantageEstimator.REINFORCE_PLUS_PLUS)
@torch.no_grad()
def compute_reinforce_plus_plus_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    config: Any = None,
    gamma: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++: discounted return G_t = r_t + gamma * G_next per valid token, advantages = returns
    whitened over the batch's valid tokens.

    G_next is the return of the next *valid* token: a masked span inside a multi-turn response (a tool's
    output, an observation) is skipped, so a later turn's reward still reaches the earlier turns, and
    the discount counts generated tokens only. Masked tokens get return 0 and their rewards are ignored.
    """
    _check_shapes(token_level_rewards, response_mask, "reinforce_plus_plus")
    gamma = _from_config(gamma, config, "gamma", 1.0, "reinforce_plus_plus")
    mask = response_mask.to(token_level_rewards.dtype)
    returns = torch.zeros_like(token_level_rewards)
    running = torch.zeros_like(token_level_rewards[:, 0])
    for t in reversed(range(token_level_rewards.shape[-1])):
        m = mask[:, t]
        candidate = token_level_rewards[:, t] + gamma * running
        returns[:, t] = candidate * m
        # a masked token passes the running return through untouched
        running = m * candidate + (1 - m) * running
    advantages = verl_F.masked_whiten(returns, mask) * mask
    return advantages, returns


@register_adv_est(AdvantageEstimator.REINFORCE_PLUS_PLUS_BASELINE)
@torch.no_grad()
def compute_reinforce_plus_plus_baseline_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Sequence | np.ndarray | None = None,
    epsilon: float = 1e-6,
    config: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++ with a group baseline: (score - group mean) broadcast over the response, then
    whitened over the batch's valid tokens."""
    _check_shapes(token_level_rewards, response_mask, "reinforce_plus_plus_baseline")
    scores = _outcome_scores(token_level_rewards, response_mask)
    gid = _group_ids(index, scores.shape[0], "reinforce_plus_plus_baseline")
    count, mean, _ = _group_stats(scores, gid)
    centred = torch.where(count > 1, scores - mean, torch.zeros_like(scores))
    mask = response_mask.to(scores.dtype)
    adv = centred.unsqueeze(-1) * mask
    adv = verl_F.masked_whiten(adv, mask) * mask
    return adv, adv


@register_adv_est(AdvantageEstimator.REMAX)
@torch.no_grad()
def compute_remax_outcome_advantage(
    token_level_rewards: torch.Tensor,
    reward_baselines: torch.Tensor | None = None,
    response_mask: torch.Tensor | None = None,
    config: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """ReMax: returns = reward-to-go sum_{t'>=t} r_t'; advantages = returns - the greedy rollout's
    reward (``reward_baselines``, one per row)."""
    if reward_baselines is None or response_mask is None:
        raise ValueError(
            "remax needs response_mask and reward_baselines (the reward of a greedy rollout per row)"
        )
    _check_shapes(token_level_rewards, response_mask, "remax")
    if reward_baselines.shape != token_level_rewards.shape[:1]:
        raise ValueError(
            f"remax: reward_baselines shape {tuple(reward_baselines.shape)} must be [batch]={token_level_rewards.shape[0]}"
        )
    mask = response_mask.to(token_level_rewards.dtype)
    returns = (token_level_rewards * mask).flip(-1).cumsum(-1).flip(-1) * mask
    advantages = (returns - reward_baselines.unsqueeze(-1).to(returns.dtype)) * mask
    return advantages, returns
