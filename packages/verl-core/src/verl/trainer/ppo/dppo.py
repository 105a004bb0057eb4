"""DPPO: a trust region on the divergence between the new and the old token distribution instead of the
ratio clip (https://arxiv.org/abs/2602.04879; upstream's ``dppo_tv`` and ``dppo_kl`` policy losses).

Both losses share PPO's signature (see ``policy_losses``) and upstream's config names, with new meanings:

- ``clip_ratio_low`` / ``clip_ratio_high`` (None: ``clip_ratio``) are divergence thresholds, not ratio
  bounds: a token keeps its gradient while the step it asks for stays inside them;
- ``clip_ratio_c`` truncates the (detached) importance ratio: truncated importance sampling instead of
  the dual clip. The paper recommends a large value (upstream suggests 20) to keep the truncation bias small.

Per token, with p = pi(y_t), q = pi_old(y_t), r = p / q and A the advantage::

    loss_t = -A * sg(min(r, clip_ratio_c)) * log p * valid_t

``dppo_tv`` (binary total variation |p - q|): a token with A > 0 is valid while p - q <= high, one with
A <= 0 while p - q >= -low (moving the probability the other way is always allowed).

``dppo_kl`` (binary KL, the KL between Bernoulli(q) and Bernoulli(p))::

    D = q log(q / p) + (1 - q) log((1 - q) / (1 - p))

a token with A > 0 is valid while D <= high or p <= q; one with A <= 0 while D <= low or p >= q.

Metrics: ``actor/pg_clipfrac`` is the share of valid tokens masked out (outside the trust region),
``actor/pg_clipfrac_lower`` the share of kept tokens whose ratio was truncated at ``clip_ratio_c``,
``actor/ppo_kl`` mean(log q - log p).
"""

from __future__ import annotations

from typing import Any

import torch

from verl.trainer.ppo.loss_agg import GlobalBatchInfo, agg_loss
from verl.trainer.ppo.policy_losses import (
    PolicyLossConfig,
    _clip_range,
    _frac,
    _log_ratio,
    _weighted,
    check_loss_inputs,
    register_policy_loss,
)
from verl.utils import torch_functional as verl_F

# keeps log(1 - p) finite when a token's probability is 1 (upstream's constant)
_BINARY_EPS = 1e-8


def _dppo(
    name: str,
    valid_fn,
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str,
    config: Any,
    rollout_is_weights: torch.Tensor | None,
    global_batch_info: GlobalBatchInfo | None,
) -> tuple[torch.Tensor, dict[str, float]]:
    config = config if config is not None else PolicyLossConfig()
    check_loss_inputs(old_log_prob, log_prob, advantages, response_mask, name)
    low, high = _clip_range(config)
    clip_c = float(config.clip_ratio_c)
    log_ratio = _log_ratio(old_log_prob, log_prob)
    ratio = torch.exp(log_ratio)
    truncated = torch.clamp(ratio, max=clip_c).detach()
    with torch.no_grad():
        valid = valid_fn(log_prob.detach(), old_log_prob, advantages, low, high).to(log_prob.dtype)
    pg_losses = -advantages * truncated * log_prob * valid
    pg_loss = agg_loss(
        _weighted(pg_losses, rollout_is_weights), response_mask, loss_agg_mode, global_batch_info=global_batch_info
    )
    metrics = {
        "actor/pg_clipfrac": _frac(valid == 0, response_mask),
        "actor/pg_clipfrac_lower": _frac((ratio > clip_c) & (valid > 0), response_mask),
        "actor/ppo_kl": float(verl_F.masked_mean(-log_ratio.detach(), response_mask).item()),
    }
    return pg_loss, metrics


def _tv_valid(log_p: torch.Tensor, log_q: torch.Tensor, advantages: torch.Tensor, low: float, high: float) -> torch.Tensor:
    p, q = torch.exp(log_p), torch.exp(log_q)
    return torch.where(advantages > 0, (p - q) <= high, (p - q) >= -low)


def binary_kl(log_p: torch.Tensor, log_q: torch.Tensor) -> torch.Tensor:
    """KL(Bernoulli(q) || Bernoulli(p)) per token, from the new (log p) and old (log q) log-probabilities."""
    p, q = torch.exp(log_p), torch.exp(log_q)
    return q * (log_q - log_p) + (1 - q) * torch.log((1 - q + _BINARY_EPS) / (1 - p + _BINARY_EPS))


def _kl_valid(log_p: torch.Tensor, log_q: torch.Tensor, advantages: torch.Tensor, low: float, high: float) -> torch.Tensor:
    p, q = torch.exp(log_p), torch.exp(log_q)
    d = binary_kl(log_p, log_q)
    return torch.where(advantages > 0, (d <= high) | (p <= q), (d <= low) | (p >= q))


@register_policy_loss("dppo_tv")
def compute_policy_loss_dppo_tv(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any = None,
    rollout_is_weights: torch.Tensor | None = None,
    global_batch_info: GlobalBatchInfo | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """DPPO with the binary total-variation trust region (see the module doc)."""
    return _dppo("dppo_tv", _tv_valid, old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config,
                 rollout_is_weights, global_batch_info)


@register_policy_loss("dppo_kl")
def compute_policy_loss_dppo_kl(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any = None,
    rollout_is_weights: torch.Tensor | None = None,
    global_batch_info: GlobalBatchInfo | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """DPPO with the binary-KL trust region (see the module doc)."""
    return _dppo("dppo_kl", _kl_valid, old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config,
                 rollout_is_weights, global_batch_info)
