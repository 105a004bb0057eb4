"""Policy-gradient losses and their registry (re-exported by ``verl.trainer.ppo.core_algos``).

Every loss has one signature::

    pg_loss, metrics = fn(old_log_prob, log_prob, advantages, response_mask,
                          loss_agg_mode="token-mean", config=None, rollout_is_weights=None,
                          global_batch_info=None)

All tensors are ``[B, T]``. ``config`` is read by attribute and is shaped like the actor config
(``actor_rollout_ref.actor``): ``clip_ratio``, ``clip_ratio_low``, ``clip_ratio_high`` (None = use
``clip_ratio``), ``clip_ratio_c`` at the top level, and the loss-mode parameters under
``config.policy_loss`` (``clip_cov_ratio``, ``clip_cov_lb``, ``clip_cov_ub``, ``kl_cov_ratio``,
``ppo_kl_coef``, ``dro_beta``). ``PolicyLossConfig`` is a flat stand-in with upstream defaults whose
``policy_loss`` is itself; ``config=None`` means ``PolicyLossConfig()``.

``rollout_is_weights`` ([B, T], no gradient) multiplies the per-token loss (importance weights that
correct for a rollout engine whose probabilities differ from the trainer's). ``global_batch_info``
is passed to ``agg_loss`` (see ``loss_agg``) so micro-batch losses sum to the mini-batch loss.

``metrics`` is a dict of floats keyed as upstream, ready for the actor's metrics:
``actor/pg_clipfrac`` (fraction of valid tokens whose ratio was clipped on the side that matters),
``actor/pg_clipfrac_lower`` (tokens where the dual clip ``clip_ratio_c`` bound the loss of a negative
advantage; for other losses the lower-side clip), ``actor/ppo_kl`` (approximate KL
mean(old_log_prob - log_prob) over valid tokens).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from verl.trainer.ppo.loss_agg import GlobalBatchInfo, agg_loss
from verl.utils import torch_functional as verl_F
from verl.utils.registry import Registry

POLICY_LOSS_REGISTRY: Registry[Callable[..., tuple[torch.Tensor, dict[str, float]]]] = Registry("policy loss")


def register_policy_loss(name: str) -> Callable:
    """Decorator: register a policy loss under ``name`` (``actor.policy_loss.loss_mode``)."""
    return POLICY_LOSS_REGISTRY.register(name)


def get_policy_loss_fn(name: str) -> Callable[..., tuple[torch.Tensor, dict[str, float]]]:
    """The loss registered under ``name``; an unknown name raises `UnknownNameError` (a ValueError, as
    upstream, and a KeyError) listing the known ones."""
    return POLICY_LOSS_REGISTRY.get(name)


@dataclass(frozen=True)
class PolicyLossConfig:
    """Loss parameters with upstream defaults, for tests and standalone use (flat; see module doc)."""

    loss_mode: str = "vanilla"
    clip_ratio: float = 0.2
    clip_ratio_low: float | None = 0.2
    clip_ratio_high: float | None = 0.2
    clip_ratio_c: float = 3.0
    clip_cov_ratio: float = 0.0002
    clip_cov_lb: float = 1.0
    clip_cov_ub: float = 5.0
    kl_cov_ratio: float = 0.0002
    ppo_kl_coef: float = 0.1
    dro_beta: float | None = None

    @property
    def policy_loss(self) -> PolicyLossConfig:
        # the actor config keeps loss-mode parameters under .policy_loss; this flat form is its own
        return self


def _clip_range(config: Any) -> tuple[float, float]:
    low = config.clip_ratio_low if config.clip_ratio_low is not None else config.clip_ratio
    high = config.clip_ratio_high if config.clip_ratio_high is not None else config.clip_ratio
    return float(low), float(high)


def _log_ratio(old_log_prob: torch.Tensor, log_prob: torch.Tensor) -> torch.Tensor:
    # clamp so exp() never overflows on a wildly off-policy token
    return torch.clamp(log_prob - old_log_prob, min=-20.0, max=20.0)


def check_loss_inputs(old_log_prob, log_prob, advantages, response_mask, name: str) -> None:
    """A policy loss's four ``[B, T]`` inputs share one shape; else a ValueError naming the loss and each shape."""
    shapes = {t.shape for t in (old_log_prob, log_prob, advantages, response_mask)}
    if len(shapes) != 1:
        raise ValueError(
            f"policy loss {name!r}: old_log_prob {tuple(old_log_prob.shape)}, log_prob {tuple(log_prob.shape)}, "
            f"advantages {tuple(advantages.shape)}, response_mask {tuple(response_mask.shape)} must share one shape"
        )


def _weighted(pg_losses: torch.Tensor, rollout_is_weights: torch.Tensor | None) -> torch.Tensor:
    return pg_losses if rollout_is_weights is None else pg_losses * rollout_is_weights.detach()


def _frac(flags: torch.Tensor, mask: torch.Tensor) -> float:
    return float(verl_F.masked_mean(flags.float(), mask).item())


@register_policy_loss("vanilla")
def compute_policy_loss_vanilla(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any = None,
    rollout_is_weights: torch.Tensor | None = None,
    global_batch_info: GlobalBatchInfo | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO clipped surrogate: max(-A r, -A clip(r, 1 - low, 1 + high)), and for A < 0 additionally
    capped at -A * clip_ratio_c (dual clip, https://arxiv.org/abs/1912.09729)."""
    config = config if config is not None else PolicyLossConfig()
    check_loss_inputs(old_log_prob, log_prob, advantages, response_mask, "vanilla")
    low, high = _clip_range(config)
    clip_c = float(config.clip_ratio_c)
    if clip_c <= 1.0:
        raise ValueError(f"clip_ratio_c must be > 1 (dual clip lower bound), got {clip_c}")
    log_ratio = _log_ratio(old_log_prob, log_prob)
    ratio = torch.exp(log_ratio)
    loss_unclipped = -advantages * ratio
    loss_clipped = -advantages * torch.clamp(ratio, 1 - low, 1 + high)
    loss_ppo = torch.maximum(loss_unclipped, loss_clipped)
    loss_dual = -advantages * clip_c
    negative = advantages < 0
    pg_losses = torch.where(negative, torch.minimum(loss_ppo, loss_dual), loss_ppo)
    pg_loss = agg_loss(
        _weighted(pg_losses, rollout_is_weights), response_mask, loss_agg_mode,
        global_batch_info=global_batch_info,
    )
    metrics = {
        "actor/pg_clipfrac": _frac(loss_clipped > loss_unclipped, response_mask),
        "actor/pg_clipfrac_lower": _frac((loss_ppo > loss_dual) & negative, response_mask),
        "actor/ppo_kl": float(verl_F.masked_mean(-log_ratio, response_mask).item()),
    }
    return pg_loss, metrics


@register_policy_loss("gspo")
def compute_policy_loss_gspo(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any = None,
    rollout_is_weights: torch.Tensor | None = None,
    global_batch_info: GlobalBatchInfo | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """GSPO (https://arxiv.org/abs/2507.18071): one ratio per sequence, s_i = exp(mean_t log r_it),
    clipped like PPO; each token's gradient is s_i * grad log pi_t. Aggregated ``seq-mean-token-mean``
    whatever ``loss_agg_mode`` says (as upstream): the objective is a mean over sequences."""
    config = config if config is not None else PolicyLossConfig()
    check_loss_inputs(old_log_prob, log_prob, advantages, response_mask, "gspo")
    low, high = _clip_range(config)
    mask = response_mask.to(log_prob.dtype)
    log_ratio = log_prob - old_log_prob
    seq_log_ratio = (log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1)
    # value = seq ratio, gradient flows through each token's own log-prob
    token_log_s = log_prob - log_prob.detach() + seq_log_ratio.detach().unsqueeze(-1)
    s = torch.exp(torch.clamp(token_log_s, max=10.0))
    loss_unclipped = -advantages * s
    loss_clipped = -advantages * torch.clamp(s, 1 - low, 1 + high)
    pg_losses = torch.maximum(loss_unclipped, loss_clipped)
    pg_loss = agg_loss(
        _weighted(pg_losses, rollout_is_weights), response_mask, "seq-mean-token-mean",
        global_batch_info=global_batch_info,
    )
    clipped = loss_clipped > loss_unclipped
    metrics = {
        "actor/pg_clipfrac": _frac(clipped, response_mask),
        "actor/pg_clipfrac_lower": _frac(clipped & (advantages < 0), response_mask),
        "actor/ppo_kl": float(verl_F.masked_mean(-log_ratio, response_mask).item()),
    }
    return pg_loss, metrics


@register_policy_loss("gpg")
def compute_policy_loss_gpg(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any = None,
    rollout_is_weights: torch.Tensor | None = None,
    global_batch_info: GlobalBatchInfo | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """GPG (https://arxiv.org/abs/2504.02546): plain policy gradient -A * log pi, no ratio, no clip."""
    check_loss_inputs(old_log_prob, log_prob, advantages, response_mask, "gpg")
    pg_losses = -advantages * log_prob
    pg_loss = agg_loss(
        _weighted(pg_losses, rollout_is_weights), response_mask, loss_agg_mode,
        global_batch_info=global_batch_info,
    )
    metrics = {
        "actor/pg_clipfrac": 0.0,
        "actor/pg_clipfrac_lower": 0.0,
        "actor/ppo_kl": float(verl_F.masked_mean(old_log_prob - log_prob.detach(), response_mask).item()),
    }
    return pg_loss, metrics


@register_policy_loss("clip_cov")
def compute_policy_loss_clip_cov(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any = None,
    rollout_is_weights: torch.Tensor | None = None,
    global_batch_info: GlobalBatchInfo | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Clip-Cov (https://arxiv.org/abs/2505.22617): PPO clipping, plus the gradient of a random
    ``clip_cov_ratio`` share of tokens is dropped among the not-already-clipped valid tokens whose
    centred covariance (A - mean A)(log pi - mean log pi) lies in (clip_cov_lb, clip_cov_ub).
    The draw uses torch's global RNG (seed it for reproducibility)."""
    config = config if config is not None else PolicyLossConfig()
    check_loss_inputs(old_log_prob, log_prob, advantages, response_mask, "clip_cov")
    params = config.policy_loss
    ratio_share, lb, ub = float(params.clip_cov_ratio), float(params.clip_cov_lb), float(params.clip_cov_ub)
    if ratio_share <= 0:
        raise ValueError(f"clip_cov_ratio must be > 0, got {ratio_share}")
    low, high = _clip_range(config)
    log_ratio = _log_ratio(old_log_prob, log_prob)
    ratio = torch.exp(log_ratio)
    loss_unclipped = -advantages * ratio
    loss_clipped = -advantages * torch.clamp(ratio, 1 - low, 1 + high)
    valid = response_mask > 0
    clipped_by_ppo = (loss_clipped > loss_unclipped) & valid
    with torch.no_grad():
        lp = log_prob.detach()
        cov = (advantages - verl_F.masked_mean(advantages, response_mask)) * (
            lp - verl_F.masked_mean(lp, response_mask)
        )
        candidates = valid & ~clipped_by_ppo & (cov > lb) & (cov < ub)
        cand_idx = torch.nonzero(candidates)
        n_drop = min(max(int(ratio_share * valid.sum().item()), 1), cand_idx.shape[0])
        keep = torch.ones_like(advantages)
        if n_drop > 0:
            chosen = cand_idx[torch.randperm(cand_idx.shape[0])[:n_drop]]
            keep[chosen[:, 0], chosen[:, 1]] = 0.0
    pg_losses = torch.maximum(loss_unclipped, loss_clipped) * keep
    pg_loss = agg_loss(
        _weighted(pg_losses, rollout_is_weights), response_mask, loss_agg_mode,
        global_batch_info=global_batch_info,
    )
    metrics = {
        "actor/pg_clipfrac": _frac(keep == 0, response_mask),
        "actor/pg_clipfrac_lower": 0.0,
        "actor/ppo_kl": float(verl_F.masked_mean(-log_ratio, response_mask).item()),
    }
    return pg_loss, metrics


@register_policy_loss("kl_cov")
def compute_policy_loss_kl_cov(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any = None,
    rollout_is_weights: torch.Tensor | None = None,
    global_batch_info: GlobalBatchInfo | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """KL-Cov (https://arxiv.org/abs/2505.22617): unclipped surrogate -A r, and on the top
    ``kl_cov_ratio`` share of valid tokens by covariance (A - mean A)(log pi - mean log pi) a penalty
    ``ppo_kl_coef * |log r|`` is added. ``pg_clipfrac`` reports the share of penalised tokens."""
    config = config if config is not None else PolicyLossConfig()
    check_loss_inputs(old_log_prob, log_prob, advantages, response_mask, "kl_cov")
    params = config.policy_loss
    share, coef = float(params.kl_cov_ratio), float(params.ppo_kl_coef)
    log_ratio = _log_ratio(old_log_prob, log_prob)
    ratio = torch.exp(log_ratio)
    pg_losses = -advantages * ratio
    valid = response_mask > 0
    penalised = torch.zeros_like(valid)
    with torch.no_grad():
        flat_idx = torch.nonzero(valid.reshape(-1)).squeeze(-1)
        n_pen = min(max(int(share * flat_idx.numel()), 1), flat_idx.numel()) if share > 0 else 0
        if n_pen > 0:
            adv_v = advantages.reshape(-1)[flat_idx]
            lp_v = log_prob.detach().reshape(-1)[flat_idx]
            cov = (adv_v - adv_v.mean()) * (lp_v - lp_v.mean())
            top = flat_idx[torch.topk(cov, n_pen).indices]
            penalised.view(-1)[top] = True
    pg_losses = torch.where(penalised, pg_losses + coef * log_ratio.abs(), pg_losses)
    pg_loss = agg_loss(
        _weighted(pg_losses, rollout_is_weights), response_mask, loss_agg_mode,
        global_batch_info=global_batch_info,
    )
    metrics = {
        "actor/pg_clipfrac": _frac(penalised, response_mask),
        "actor/pg_clipfrac_lower": 0.0,
        "actor/ppo_kl": float(verl_F.masked_mean(-log_ratio, response_mask).item()),
    }
    return pg_loss, metrics


@register_policy_loss("geo_mean")
def compute_policy_loss_geo_mean(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any = None,
    rollout_is_weights: torch.Tensor | None = None,
    global_batch_info: GlobalBatchInfo | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """GMPO (https://arxiv.org/abs/2507.20673): per sequence, -A_i * exp(mean_t clipped log r_t), where
    a token's log ratio is clipped to [-clip_ratio_low, clip_ratio_high] (in log space) on the side
    that would increase the objective (sign(A) * log r is min'ed with its clipped value). A_i is the
    sequence's mean advantage. Sequence losses are averaged (mean over sequences, as upstream), with
    ``rollout_is_weights`` averaged per sequence."""
    config = config if config is not None else PolicyLossConfig()
    check_loss_inputs(old_log_prob, log_prob, advantages, response_mask, "geo_mean")
    low, high = _clip_range(config)
    mask = response_mask.to(log_prob.dtype)
    lengths = mask.sum(-1).clamp(min=1)
    log_ratio = _log_ratio(old_log_prob, log_prob)
    sign = torch.sign(advantages)
    log_ratio_clamped = torch.clamp(log_ratio, -low, high)
    log_ratio_used = sign * torch.minimum(sign * log_ratio, sign * log_ratio_clamped)
    seq_ratio = torch.exp((log_ratio_used * mask).sum(-1) / lengths)
    seq_adv = (advantages * mask).sum(-1) / lengths
    seq_loss = -seq_adv * seq_ratio
    if rollout_is_weights is not None:
        seq_loss = seq_loss * (rollout_is_weights.detach() * mask).sum(-1) / lengths
    # spread each sequence loss over its tokens so agg_loss can apply the global sequence count
    pg_loss = agg_loss(
        seq_loss.unsqueeze(-1).expand_as(mask), response_mask, "seq-mean-token-mean",
        global_batch_info=global_batch_info,
    )
    clipped = log_ratio != log_ratio_clamped
    metrics = {
        "actor/pg_clipfrac": _frac(clipped & (advantages > 0), response_mask),
        "actor/pg_clipfrac_lower": _frac(clipped & (advantages < 0), response_mask),
        "actor/ppo_kl": float(verl_F.masked_mean(-log_ratio, response_mask).item()),
    }
    return pg_loss, metrics


@register_policy_loss("cispo")
def compute_policy_loss_cispo(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any = None,
    rollout_is_weights: torch.Tensor | None = None,
    global_batch_info: GlobalBatchInfo | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """CISPO (MiniMax-M1, https://arxiv.org/abs/2506.13585): -sg(clip(r, 1 - low, 1 + high)) * A * log pi.
    The importance weight is clipped and detached, so every token keeps a gradient (none is dropped
    by clipping, unlike PPO)."""
    config = config if config is not None else PolicyLossConfig()
    check_loss_inputs(old_log_prob, log_prob, advantages, response_mask, "cispo")
    low, high = _clip_range(config)
    log_ratio = _log_ratio(old_log_prob, log_prob)
    ratio = torch.exp(log_ratio).detach()
    weight = torch.clamp(ratio, 1 - low, 1 + high)
    pg_losses = -advantages * weight * log_prob
    pg_loss = agg_loss(
        _weighted(pg_losses, rollout_is_weights), response_mask, loss_agg_mode,
        global_batch_info=global_batch_info,
    )
    metrics = {
        "actor/pg_clipfrac": _frac(ratio > 1 + high, response_mask),
        "actor/pg_clipfrac_lower": _frac(ratio < 1 - low, response_mask),
        "actor/ppo_kl": float(verl_F.masked_mean(-log_ratio, response_mask).item()),
    }
    return pg_loss, metrics


@register_policy_loss("dro")
def compute_policy_loss_dro(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any = None,
    rollout_is_weights: torch.Tensor | None = None,
    global_batch_info: GlobalBatchInfo | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """DRO (Direct Reward Optimization, https://arxiv.org/abs/2405.19107): per token
    -(A * log pi - beta / 2 * (log pi - log pi_old)^2), with beta = ``policy_loss.dro_beta`` (> 0,
    required). The quadratic term keeps the policy near the sampling one in place of ratio clipping."""
    config = config if config is not None else PolicyLossConfig()
    check_loss_inputs(old_log_prob, log_prob, advantages, response_mask, "dro")
    beta = config.policy_loss.dro_beta
    if beta is None or float(beta) <= 0:
        raise ValueError(
            f"policy loss 'dro' needs actor_rollout_ref.actor.policy_loss.dro_beta > 0, got {beta!r}"
        )
    log_ratio = log_prob - old_log_prob
    pg_losses = -(advantages * log_prob - 0.5 * float(beta) * log_ratio.square())
    pg_loss = agg_loss(
        _weighted(pg_losses, rollout_is_weights), response_mask, loss_agg_mode,
        global_batch_info=global_batch_info,
    )
    metrics = {
        "actor/pg_clipfrac": 0.0,  # nothing is clipped
        "actor/pg_clipfrac_lower": 0.0,
        "actor/ppo_kl": float(verl_F.masked_mean(-log_ratio.detach(), response_mask).item()),
    }
    return pg_loss, metrics
