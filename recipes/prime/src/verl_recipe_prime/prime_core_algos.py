"""PRIME's math (arXiv 2502.01456), as plain torch functions: no Ray, no workers, no config objects.

The implicit PRM is a causal LM ``pi_phi`` next to a frozen reference ``pi_ref`` (both start as the SFT
model). For a response ``y`` its per-token *log-ratio* is ``q_t = log pi_phi(y_t | y_<t) - log pi_ref(y_t | y_<t)``
(what the PRM worker returns, zero outside the response mask), and

- the implicit process reward of token t is ``r_t = beta * q_t`` (`implicit_process_reward`);
- the PRM is trained as an outcome classifier: ``p(correct) = sigmoid(beta * sum_t q_t)`` with a binary
  cross-entropy against the outcome label (`compute_ce_dpo_loss_rm`, upstream's ``loss_type=ce``);
- the policy's advantage is RLOO computed separately on the process rewards and on the outcome
  reward, weighted ``reward_dpo_coef`` / ``reward_gt_coef``, summed, turned into returns and whitened
  (`compute_prime_rloo_advantage`).

Groups (the ``rollout.n`` answers to one prompt) are given by ``index`` (the ``uid`` of each row), as in
core's estimators, so rows need not be contiguous and a group may have any size; a group of one has no
leave-one-out baseline and contributes 0.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from verl.utils.torch_functional import masked_whiten

GRANULARITIES = ("token", "whole")
NORMS = ("batch_norm", "none")


def _group_ids(index: Sequence | np.ndarray, rows: int) -> torch.Tensor:
    """Dense group ids 0..G-1 in first-seen order (any hashable uid)."""
    if len(index) != rows:
        raise ValueError(f"index has {len(index)} entries but the batch has {rows} rows")
    dense: dict = {}
    return torch.tensor([dense.setdefault(k, len(dense)) for k in index], dtype=torch.long)


def last_token_mask(response_mask: torch.Tensor) -> torch.Tensor:
    """Bool [B, R]: True on the last response token of each row (nowhere for an empty response)."""
    mask = response_mask.bool()
    r = mask.shape[-1]
    positions = torch.arange(r, device=mask.device).expand_as(mask)
    last = torch.where(mask, positions, torch.full_like(positions, -1)).max(dim=-1).values
    return (positions == last.unsqueeze(-1)) & mask


def implicit_process_reward(
    log_ratio: torch.Tensor, response_mask: torch.Tensor, beta: float, granularity: str = "token"
) -> torch.Tensor:
    """Token-level implicit rewards [B, R] from the PRM's log-ratios ``q`` [B, R].

    ``token`` (upstream's ``prime_granularity=token``): ``beta * q_t`` on every response token, as the
    paper defines the implicit process reward (upstream's code leaves the last token's at 0; here it is
    kept). ``whole``: the sum ``beta * sum_t q_t`` on the last response token (an implicit outcome reward).
    """
    mask = response_mask.to(log_ratio.dtype)
    r = beta * log_ratio * mask
    if granularity == "token":
        return r
    if granularity == "whole":
        return r.sum(dim=-1, keepdim=True) * last_token_mask(response_mask).to(r.dtype)
    raise ValueError(f"prime_granularity={granularity!r} is not one of: {', '.join(GRANULARITIES)}")


def prime_norm(scores: torch.Tensor, response_mask: torch.Tensor, mode: str = "batch_norm") -> torch.Tensor:
    """Upstream's ``prime_norm``: ``batch_norm`` divides every score by ``max |sum_{s>=t} r_s| + 1e-6`` over
    the whole batch (the largest return-to-go magnitude), ``none`` leaves them as they are (scaled by beta
    only)."""
    if mode == "none":
        return scores
    if mode != "batch_norm":
        raise ValueError(f"prime_norm={mode!r} is not one of: {', '.join(NORMS)}")
    masked = scores * response_mask.to(scores.dtype)
    to_go = masked.flip(dims=[-1]).cumsum(dim=-1).flip(dims=[-1])
    return masked / (to_go.abs().max() + 1e-6)


def sequence_log_ratio(log_ratio: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """``sum_t q_t`` over each row's response tokens [B]."""
    return (log_ratio * response_mask.to(log_ratio.dtype)).sum(dim=-1)


def compute_ce_dpo_loss_rm(
    log_ratio: torch.Tensor,
    acc: torch.Tensor,
    response_mask: torch.Tensor,
    beta: float,
    reduction: str = "mean",
) -> torch.Tensor:
    """The PRM's cross-entropy on outcome labels: ``BCE(sigmoid(beta * sum_t q_t), acc)``.

    ``acc`` [B] are outcome labels in [0, 1]. ``reduction`` ``mean`` (upstream) or ``sum`` (the worker sums
    per micro-batch and divides by the mini-batch's global row count itself). Computed from logits, so
    large ``|beta * sum q|`` cannot overflow.
    """
    logits = beta * sequence_log_ratio(log_ratio, response_mask)
    return F.binary_cross_entropy_with_logits(logits, acc.to(logits.dtype), reduction=reduction)


def compute_dpo_accuracy(
    log_ratio: torch.Tensor, acc: torch.Tensor, response_mask: torch.Tensor, index: Sequence | np.ndarray
) -> float:
    """Upstream's ``dpo_acc``: within each group, over every pair of answers whose labels differ, the share
    (weighted by the label difference) the PRM orders like the labels (``sum q`` higher for the better
    answer). A group with no differing pair counts 0.5; the result is the mean over groups."""
    seq = sequence_log_ratio(log_ratio, response_mask).double()
    labels = acc.double()
    gid = _group_ids(index, len(seq))
    per_group = []
    for g in range(int(gid.max().item()) + 1 if len(gid) else 0):
        rows = (gid == g).nonzero().flatten()
        s, a = seq[rows], labels[rows]
        upper = torch.triu(torch.ones(len(rows), len(rows), dtype=torch.bool), diagonal=1)
        ds, da = (s.unsqueeze(1) - s.unsqueeze(0))[upper], (a.unsqueeze(1) - a.unsqueeze(0))[upper]
        weight = da.abs()
        if weight.sum() == 0:
            per_group.append(0.5)
        else:
            per_group.append(float((((ds > 0) == (da > 0)).double() * weight).sum() / weight.sum()))
    return float(np.mean(per_group)) if per_group else float("nan")


def compute_dpo_abs_accuracy(
    log_ratio: torch.Tensor, acc: torch.Tensor, response_mask: torch.Tensor
) -> float:
    """Upstream's ``dpo_abs_acc``: the share of answers the PRM classifies right on its own, i.e. whose
    ``sign(sum q)`` equals ``sign(2 acc - 1)`` (``p(correct) > 1/2`` exactly for the right answers)."""
    seq = sequence_log_ratio(log_ratio, response_mask)
    return float((torch.sign(seq) == torch.sign(acc.to(seq.dtype) * 2 - 1)).double().mean())


def masked_rloo(rewards: torch.Tensor, mask: torch.Tensor, index: Sequence | np.ndarray) -> torch.Tensor:
    """Leave-one-out baseline on one reward source (upstream's ``masked_rloo``), per group of size n >= 2:

        r'_{i,t} = r_{i,t} * n / (n - 1) - sum_{j in group} mean_t(r_{j,t}) / (n - 1)     on mask positions

    where ``mean_t`` is over row j's mask positions. For a source with one reward per row (the outcome on
    the last token) this is ``r_i - mean_{j != i} r_j``. Zero outside the mask and for groups of one.
    """
    mask_f = mask.to(rewards.dtype)
    r = rewards * mask_f
    counts = mask_f.sum(dim=-1)
    row_mean = torch.where(counts > 0, r.sum(dim=-1) / counts.clamp(min=1), torch.zeros_like(counts))
    gid = _group_ids(index, len(r)).to(r.device)
    groups = int(gid.max().item()) + 1 if len(gid) else 0
    size = torch.zeros(groups, dtype=r.dtype, device=r.device).index_add_(0, gid, torch.ones_like(row_mean))[
        gid
    ]
    total = torch.zeros(groups, dtype=r.dtype, device=r.device).index_add_(0, gid, row_mean)[gid]
    denom = (size - 1).clamp(min=1)
    out = r * (size / denom).unsqueeze(-1) - (total / denom).unsqueeze(-1)
    return torch.where((size > 1).unsqueeze(-1), out, torch.zeros_like(out)) * mask_f


@torch.no_grad()
def compute_prime_rloo_advantage(
    response_mask: torch.Tensor,
    index: Sequence | np.ndarray,
    acc: torch.Tensor | None,
    rm_scores: torch.Tensor | None,
    reward_gt_coef: float,
    reward_dpo_coef: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """PRIME's advantage (upstream's ``rloo`` in its recipe): RLOO on each reward source, weighted, summed.

    - outcome: ``acc`` [B] on each row's last response token, ``masked_rloo`` over that one position,
      times ``reward_gt_coef``;
    - process: the implicit rewards ``rm_scores`` [B, R] on every response token, ``masked_rloo`` over the
      response mask, times ``reward_dpo_coef``.

    A source that is None or has coefficient 0 is left out. ``returns_t = sum_{s>=t} R_s`` (no discount)
    and ``advantages = masked_whiten(returns)`` over the batch's response tokens. Both [B, R], zero outside
    the mask (upstream leaves the whitened padding non-zero; the actor never reads it).
    """
    mask = response_mask.to(torch.float32)
    parts = []
    if rm_scores is not None and reward_dpo_coef != 0.0:
        parts.append(masked_rloo(rm_scores.float(), response_mask.bool(), index) * reward_dpo_coef)
    if acc is not None and reward_gt_coef != 0.0:
        last = last_token_mask(response_mask)
        outcome = last.to(torch.float32) * acc.float().unsqueeze(-1)
        parts.append(masked_rloo(outcome, last, index) * reward_gt_coef)
    if not parts:
        raise ValueError(
            "PRIME's advantage has no reward source: give acc with reward_gt_coef != 0 and/or rm_scores with "
            "reward_dpo_coef != 0"
        )
    total = sum(parts) * mask
    returns = total.flip(dims=[-1]).cumsum(dim=-1).flip(dims=[-1]) * mask
    advantages = masked_whiten(returns, mask) * mask
    return advantages, returns
