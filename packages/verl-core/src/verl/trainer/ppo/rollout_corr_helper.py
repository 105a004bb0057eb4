"""Rollout correction: truncated importance-sampling (TIS) weights between the rollout and training policies.

Upstream's module name and config (``algorithm.rollout_correction``); the code is ours. The rollout engine
samples tokens from pi_rollout (another precision, another engine, or, in asynchronous training, weights
that are one or more syncs old); the trainer's "old" policy pi_old is the trainer's own forward over the
same tokens. Two operating modes, as upstream:

- decoupled (``bypass_mode=false``, three policies): ``old_log_probs`` come from the trainer and every
  token's policy-gradient loss is multiplied by ``w = min(pi_old / pi_rollout, rollout_is_threshold)``
  (``rollout_is=token``) or by one weight per sequence, the product of its token ratios, truncated the
  same way (``rollout_is=sequence``); weights are 0 on padding and carry no gradient. The trainer
  adds them to the batch as ``rollout_is_weights`` (`compute_rollout_correction_and_add_to_batch`,
  called by ``RayPPOTrainer.stage_old_log_prob``) and every policy loss multiplies by them.
- bypass (``bypass_mode=true``, two policies): ``old_log_probs := rollout_log_probs``, no trainer
  forward; with ``loss_type=ppo_clip`` the PPO ratio pi/pi_rollout already is the correction, so no
  weights are added (upstream computes them for metrics only).

With ``rollout_is_batch_normalize`` the truncated weights are divided by their mean over the batch
(tokens, or sequences for ``sequence``), so they average 1. Rejection sampling (``rollout_rs``) and the
``reinforce`` bypass loss are refused by the config validation (not implemented here).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from verl.utils import torch_functional as verl_F

# exp() of a summed log-ratio would overflow for long, off-policy sequences: clamp in log space first.
SAFETY_BOUND = 20.0
ROLLOUT_IS_LEVELS = ("token", "sequence")


def compute_rollout_correction_weights(
    log_ratio: torch.Tensor,
    response_mask: torch.Tensor,
    rollout_is: str = "token",
    rollout_is_threshold: float = 2.0,
    rollout_is_batch_normalize: bool = False,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Truncated IS weights ``[B, T]`` from ``log_ratio = log pi_old - log pi_rollout`` (``[B, T]``).

    ``token``: ``w_t = min(exp(log_ratio_t), threshold)``; ``sequence``: every token of a row gets
    ``min(exp(sum_t mask_t * log_ratio_t), threshold)``. Weights are 0 where ``response_mask`` is 0 and
    detached. Metrics (upstream's names, without the ``rollout_corr/`` prefix): ``rollout_is_mean`` /
    ``_max`` / ``_min`` of the applied weights over valid tokens, ``rollout_is_ratio_fraction_high``
    (share of raw weights above the threshold: of tokens, or of sequences), ``rollout_is_eff_sample_size``
    (``1 / mean(w_norm^2)`` with ``w_norm = w / mean(w)``), and ``rollout_is_batch_norm_factor`` when
    normalising.
    """
    if rollout_is not in ROLLOUT_IS_LEVELS:
        raise ValueError(f"rollout_is={rollout_is!r} is not one of {ROLLOUT_IS_LEVELS}")
    threshold = float(rollout_is_threshold)
    if not threshold > 0 or math.isinf(threshold):
        raise ValueError(f"rollout_is_threshold={rollout_is_threshold!r} must be a positive finite number")
    if log_ratio.shape != response_mask.shape:
        raise ValueError(
            f"log_ratio {tuple(log_ratio.shape)} and response_mask {tuple(response_mask.shape)} differ"
        )
    mask = response_mask.to(log_ratio.dtype)
    if not bool(mask.any()):
        raise ValueError("response_mask has no valid token: there is nothing to weight")
    log_ratio = log_ratio.detach()
    if rollout_is == "token":
        raw = torch.exp(log_ratio.clamp(-SAFETY_BOUND, SAFETY_BOUND)) * mask
        above = verl_F.masked_mean((raw > threshold).to(mask.dtype), mask)
    else:
        seq_log_ratio = (log_ratio * mask).sum(-1, keepdim=True)
        seq_raw = torch.exp(seq_log_ratio.clamp(-SAFETY_BOUND, SAFETY_BOUND))
        raw = seq_raw.expand_as(log_ratio) * mask
        rows = mask.sum(-1) > 0
        above = (seq_raw.squeeze(-1)[rows] > threshold).to(mask.dtype).mean()
    weights = raw.clamp(max=threshold)
    valid = mask.bool()
    mean = verl_F.masked_mean(weights, mask)
    metrics = {
        "rollout_is_mean": float(mean),
        "rollout_is_max": float(weights[valid].max()),
        "rollout_is_min": float(weights[valid].min()),
        "rollout_is_ratio_fraction_high": float(above),
        "rollout_is_eff_sample_size": float(
            1.0 / verl_F.masked_mean((weights / (mean + 1e-8)).square(), mask)
        ),
    }
    if rollout_is_batch_normalize:
        if rollout_is == "token":
            norm = mean
        else:  # one weight per sequence: the mean over sequences, not over tokens
            norm = weights.max(-1).values[mask.sum(-1) > 0].mean()
        if float(norm) > 1e-8:
            weights = weights / norm
            metrics["rollout_is_batch_norm_factor"] = float(norm)
        else:
            metrics["rollout_is_batch_norm_factor"] = 1.0
    return weights, metrics


def compute_rollout_correction_and_add_to_batch(
    batch: Any, rollout_corr_config: Any
) -> tuple[Any, dict[str, float]]:
    """Add ``rollout_is_weights`` (from ``old_log_probs`` and ``rollout_log_probs``) to ``batch`` when
    ``rollout_corr_config.rollout_is`` is set; returns the batch and its ``rollout_corr/*`` metrics.

    ``rollout_corr_config`` is ``algorithm.rollout_correction`` (read by attribute)."""
    level = rollout_corr_config.rollout_is
    if level is None:
        return batch, {}
    b = batch.batch
    missing = [k for k in ("old_log_probs", "rollout_log_probs", "response_mask") if k not in b]
    if missing:
        raise KeyError(
            f"algorithm.rollout_correction.rollout_is={level!r} needs batch keys {missing} (the rollout must "
            f"return rollout_log_probs: rollout.calculate_log_probs=true); the batch has {sorted(b.keys())}"
        )
    weights, metrics = compute_rollout_correction_weights(
        b["old_log_probs"] - b["rollout_log_probs"],
        b["response_mask"],
        rollout_is=level,
        rollout_is_threshold=float(rollout_corr_config.rollout_is_threshold),
        rollout_is_batch_normalize=bool(rollout_corr_config.rollout_is_batch_normalize),
    )
    b["rollout_is_weights"] = weights
    return batch, {f"rollout_corr/{k}": v for k, v in metrics.items()}


__all__ = [
    "ROLLOUT_IS_LEVELS",
    "SAFETY_BOUND",
    "compute_rollout_correction_and_add_to_batch",
    "compute_rollout_correction_weights",
]
