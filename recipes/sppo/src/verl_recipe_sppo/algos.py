"""SPPO's math as core_algos registry entries (imported by the ``verl.plugins`` entry point, so every
process, Ray workers included, finds them by name).

SPPO (Wu et al. 2024, arXiv 2405.00675) moves the policy towards ``pi_{t+1}(y|x) ~ pi_t(y|x) exp(eta P(y > pi_t | x))``
by regressing each sampled answer's log-ratio on its scaled win rate against the other answers::

    loss(y) = (log pi(y|x) - log pi_t(y|x) - eta * (P_hat(y > pi_t | x) - 1/2))^2

The log-probabilities are sequence sums; ``pi_t`` is the policy that sampled (``old_log_probs``). No
critic, no ratio clipping. The preference signal comes from the rule reward of the ``rollout.n``
answers to one prompt (rows sharing a ``uid``):

- advantage ``sppo`` (upstream verl's estimate): ``A_i = r_i - softmean_beta(r_B)`` with
  ``softmean_beta(r) = log(mean(exp(beta * r))) / beta`` (the plain mean at ``beta = 0``),
  ``beta = algorithm.sppo_eta``, and ``B`` per ``algorithm.sppo_baseline``: ``batch`` (upstream: every row
  of the batch, so it runs with upstream's ``rollout.n=1``) or ``group`` (the rows sharing i's prompt);
- advantage ``sppo_win_rate`` (the paper's ``P_hat - 1/2`` with the rule reward as the preference
  model): ``A_i = mean_{j != i} (1[r_i > r_j] + 1/2 * 1[r_i = r_j]) - 1/2``;
- policy loss ``sppo``: ``(sum_t log pi - sum_t log pi_old - eta * A_i)^2`` per sequence, averaged over
  sequences, ``eta = actor_rollout_ref.actor.sppo_eta``.

With the ``group`` baseline or ``sppo_win_rate``, a group of one answer gets ``A = 0`` (nothing to compare
with). Advantages come back on every valid
response token (the loss reads one value per sequence).
"""

from __future__ import annotations

from typing import Any

import torch
from verl.trainer.ppo.core_algos import (
    GlobalBatchInfo,
    agg_loss,
    check_loss_inputs,
    masked_mean,
    recipe_config_key,
    register_adv_est,
    register_policy_loss,
)

__all__ = [
    "SPPO_BASELINES",
    "compute_policy_loss_sppo",
    "compute_sppo_advantage",
    "compute_sppo_win_rate_advantage",
    "softmean",
]


SPPO_BASELINES = ("batch", "group")


def softmean(x: torch.Tensor, beta: float) -> torch.Tensor:
    """``log(mean(exp(beta * x))) / beta`` over the last dimension (``mean(x)`` when ``beta == 0``)."""
    if beta == 0.0:
        return x.mean(dim=-1)
    log_n = torch.log(torch.tensor(float(x.shape[-1]), dtype=x.dtype))
    return (torch.logsumexp(beta * x, dim=-1) - log_n) / beta


def _groups(index: Any, batch: int, estimator: str) -> list[list[int]]:
    """Row indices of each group (rows sharing an ``index`` value), in first-seen order."""
    if index is None:
        raise ValueError(f"{estimator} needs index: the group id (prompt uid) of each of the {batch} rows")
    if len(index) != batch:
        raise ValueError(f"{estimator}: index has {len(index)} entries but the batch has {batch} rows")
    groups: dict[Any, list[int]] = {}
    for row, key in enumerate(index):
        groups.setdefault(key, []).append(row)
    return list(groups.values())


def _param(config: Any, key: str, where: str, user: str) -> Any:
    return recipe_config_key(config, key, where, user, "verl-sppo")


def _on_tokens(per_row: torch.Tensor, response_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(advantages, returns) as [B, T]: each row's value on its valid tokens (returns = advantages)."""
    on_tokens = per_row.unsqueeze(-1) * response_mask.to(per_row.dtype)
    return on_tokens, on_tokens


def _scores(token_level_rewards: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    return (token_level_rewards * response_mask.to(token_level_rewards.dtype)).sum(dim=-1)


@register_adv_est("sppo")
def compute_sppo_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Any = None,
    config: Any = None,
    sppo_eta: float | None = None,
    sppo_baseline: str | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``A_i = r_i - softmean_beta(rewards of the batch | of i's group)``, ``beta = sppo_eta`` (or
    ``config.sppo_eta``), the rows per ``sppo_baseline`` (or ``config.sppo_baseline``)."""
    beta = float(sppo_eta if sppo_eta is not None else _param(config, "sppo_eta", "algorithm", "estimator 'sppo'"))
    baseline = (
        sppo_baseline
        if sppo_baseline is not None
        else _param(config, "sppo_baseline", "algorithm", "estimator 'sppo'")
    )
    if baseline not in SPPO_BASELINES:
        raise ValueError(f"sppo_baseline={baseline!r} is not one of: {', '.join(SPPO_BASELINES)}")
    scores = _scores(token_level_rewards, response_mask)
    if baseline == "batch":
        return _on_tokens(scores - softmean(scores, beta), response_mask)
    adv = torch.zeros_like(scores)
    for rows in _groups(index, len(scores), "sppo"):
        group = scores[rows]
        adv[rows] = group - softmean(group, beta)
    return _on_tokens(adv, response_mask)


@register_adv_est("sppo_win_rate")
def compute_sppo_win_rate_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Any = None,
    config: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``A_i = P_hat(y_i > the other answers of its group) - 1/2`` (a tie counts one half)."""
    scores = _scores(token_level_rewards, response_mask)
    adv = torch.zeros_like(scores)
    for rows in _groups(index, len(scores), "sppo_win_rate"):
        if len(rows) < 2:
            continue
        group = scores[rows]
        wins = (group[:, None] > group[None, :]).to(scores.dtype) + 0.5 * (
            group[:, None] == group[None, :]
        ).to(scores.dtype)
        # the diagonal (each answer against itself) is a tie worth 1/2: take it out of the mean
        adv[rows] = (wins.sum(dim=1) - 0.5) / (len(rows) - 1) - 0.5
    return _on_tokens(adv, response_mask)


@register_policy_loss("sppo")
def compute_policy_loss_sppo(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any = None,
    rollout_is_weights: torch.Tensor | None = None,
    global_batch_info: GlobalBatchInfo | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Per sequence ``(sum_t (log pi - log pi_old) - eta * A)^2``, the mean over sequences.

    ``A`` is the row's advantage (its mean over valid tokens), ``eta = config.sppo_eta``. Like ``gspo``,
    the loss is one number per sequence, so it is averaged over sequences whatever ``loss_agg_mode``
    says (that mode still aggregates the entropy and KL terms); with ``global_batch_info`` over the
    sequences of the whole mini-batch. ``rollout_is_weights`` scale each sequence by their mean.
    Metrics (upstream's names): ``actor/log_ratio_mean`` and ``actor/preference_mean`` (``eta * A``),
    means over the micro-batch's sequences (the actor averages micro-batches by their token share).
    """
    check_loss_inputs(old_log_prob, log_prob, advantages, response_mask, "sppo")
    eta = float(_param(config, "sppo_eta", "actor_rollout_ref.actor", "policy loss 'sppo'"))
    mask = response_mask.to(log_prob.dtype)
    log_ratio = ((log_prob - old_log_prob) * mask).sum(dim=-1)
    lengths = mask.sum(dim=-1).clamp(min=1)
    target = eta * (advantages * mask).sum(dim=-1) / lengths
    seq_loss = (log_ratio - target) ** 2
    if rollout_is_weights is not None:
        seq_loss = seq_loss * (rollout_is_weights.detach() * mask).sum(dim=-1) / lengths
    # spread each sequence's loss over its tokens so agg_loss applies the (global) sequence count; by
    # keyword, as upstream's positional parameters after the mode are other normalisers
    loss = agg_loss(
        seq_loss.unsqueeze(-1).expand_as(mask),
        response_mask,
        "seq-mean-token-mean",
        global_batch_info=global_batch_info,
    )
    rows = mask.sum(dim=-1) > 0
    metrics = {
        "actor/pg_clipfrac": 0.0,
        "actor/pg_clipfrac_lower": 0.0,
        "actor/ppo_kl": float(masked_mean(old_log_prob - log_prob.detach(), response_mask).item()),
        "actor/log_ratio_mean": float(log_ratio.detach()[rows].mean().item()) if rows.any() else 0.0,
        "actor/preference_mean": float(target[rows].mean().item()) if rows.any() else 0.0,
    }
    return loss, metrics
