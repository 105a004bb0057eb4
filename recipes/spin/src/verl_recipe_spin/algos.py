"""SPIN's math as core_algos registry entries (imported by the ``verl.plugins`` entry point, so every
process, Ray workers included, finds them by name).

SPIN (Chen et al. 2024, arXiv 2401.01335) trains the policy to tell a preferred answer ``y_w`` from its own
previous iterate's answer ``y_l`` with the DPO loss, the previous iterate being the reference::

    h = (log pi(y_w|x) - log pi_ref(y_w|x)) - (log pi(y_l|x) - log pi_ref(y_l|x))     (sequence sums)
    sigmoid: -log sigmoid(beta * h)          ipo: (h - 1 / (2 * beta))^2

Batches come as pairs: rows ``2i`` and ``2i + 1`` answer the same prompt (same ``uid``), built by
``verl_recipe_spin.pairs``.

- advantage ``spin``: the pair labels the loss reads, ``+1`` on the chosen row and ``-1`` on the
  rejected one. ``algorithm.spin_mode=reward`` (upstream): the row with the higher rule reward is chosen;
  a tie follows ``algorithm.spin_ties``: ``first_chosen`` (upstream's ``argmax``: the pair's first row is
  chosen and the pair trains) or ``drop`` (both rows 0: the pair carries no preference and trains nothing).
  ``spin_mode=sft`` (the paper): the first row of each pair, the dataset's target, is always chosen.
- policy loss ``dpo``: the loss above per pair, averaged over pairs (a dropped tie counts as 0, as an
  all-equal GRPO group does). Its ``old_log_prob`` argument holds the *reference* log-probs (the
  recipe's trainer passes ``ref_log_prob`` in that slot); ``beta = actor.dpo_beta`` and the type
  ``actor.dpo_loss_type``, both defaulting to their ``algorithm.*`` keys.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from verl.trainer.ppo.core_algos import (
    GlobalBatchInfo,
    check_loss_inputs,
    recipe_config_key,
    register_adv_est,
    register_policy_loss,
)

__all__ = [
    "DPO_LOSS_TYPES",
    "SPIN_MODES",
    "SPIN_TIES",
    "compute_policy_loss_dpo",
    "compute_spin_pair_labels",
    "dpo_pair_losses",
]

DPO_LOSS_TYPES = ("sigmoid", "ipo")
SPIN_MODES = ("reward", "sft")
SPIN_TIES = ("first_chosen", "drop")


def _param(config: Any, key: str, where: str, user: str) -> Any:
    return recipe_config_key(config, key, where, user, "verl-spin")


def _check_pairs(rows: int, what: str) -> None:
    if rows % 2:
        raise ValueError(
            f"{what}: {rows} rows do not form (chosen, rejected) pairs; rows 2i and 2i+1 are a pair"
        )


def _row_means(values: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    mask = response_mask.to(values.dtype)
    return (values * mask).sum(dim=-1) / mask.sum(dim=-1).clamp(min=1)


@register_adv_est("spin")
def compute_spin_pair_labels(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Any = None,
    config: Any = None,
    spin_mode: str | None = None,
    spin_ties: str | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pair labels (+1 chosen, -1 rejected, 0 no preference) on every valid token; see the module doc.

    ``spin_mode`` (or ``config.spin_mode``): ``reward`` compares the pair's summed rewards, ``sft``
    prefers the first row of every pair. ``spin_ties`` (or ``config.spin_ties``): what a tied pair of
    ``reward`` mode gets. ``index`` (the uids) must pair rows ``2i`` and ``2i + 1``.
    """
    mode = (
        spin_mode if spin_mode is not None else _param(config, "spin_mode", "algorithm", "estimator 'spin'")
    )
    if mode not in SPIN_MODES:
        raise ValueError(f"spin_mode={mode!r} is not one of: {', '.join(SPIN_MODES)}")
    ties = spin_ties if spin_ties is not None else _param(config, "spin_ties", "algorithm", "estimator 'spin'")
    if ties not in SPIN_TIES:
        raise ValueError(f"spin_ties={ties!r} is not one of: {', '.join(SPIN_TIES)}")
    rows = token_level_rewards.shape[0]
    _check_pairs(rows, "estimator 'spin'")
    if index is not None:
        if len(index) != rows:
            raise ValueError(
                f"estimator 'spin': index has {len(index)} entries but the batch has {rows} rows"
            )
        apart = [i for i in range(0, rows, 2) if index[i] != index[i + 1]]
        if apart:
            raise ValueError(
                f"estimator 'spin': rows {apart[0]} and {apart[0] + 1} have different uids "
                f"({index[apart[0]]!r}, {index[apart[0] + 1]!r}); a pair answers one prompt"
            )
    if mode == "sft":
        first = torch.ones(rows // 2, dtype=token_level_rewards.dtype)
    else:
        scores = (token_level_rewards * response_mask.to(token_level_rewards.dtype)).sum(dim=-1).view(-1, 2)
        first = torch.sign(scores[:, 0] - scores[:, 1])
        if ties == "first_chosen":
            first = torch.where(first == 0, torch.ones_like(first), first)
    labels = torch.stack([first, -first], dim=1).reshape(-1)
    on_tokens = labels.unsqueeze(-1) * response_mask.to(labels.dtype)
    return on_tokens, on_tokens


def dpo_pair_losses(logits: torch.Tensor, beta: float, loss_type: str) -> torch.Tensor:
    """The per-pair DPO loss of ``h = logits`` (chosen minus rejected log-ratio to the reference)."""
    if loss_type == "sigmoid":
        return -F.logsigmoid(beta * logits)
    if loss_type == "ipo":
        return (logits - 1.0 / (2.0 * beta)) ** 2
    raise ValueError(f"dpo_loss_type={loss_type!r} is not one of: {', '.join(DPO_LOSS_TYPES)}")


@register_policy_loss("dpo")
def compute_policy_loss_dpo(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any = None,
    rollout_is_weights: torch.Tensor | None = None,
    global_batch_info: GlobalBatchInfo | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """DPO over (chosen, rejected) row pairs; ``old_log_prob`` is the reference (see the module doc).

    The loss is one number per pair: summed over the pairs with a preference and divided by the number
    of pairs (with ``global_batch_info``: of the whole mini-batch, half its sequence count), so
    ``loss_agg_mode`` plays no part here (it still aggregates the entropy and KL terms). A pair never
    spans micro-batches (the trainer sends ``meta_info["rows_per_prompt"] = 2``).
    ``rollout_is_weights`` are refused: an off-policy correction means nothing against a reference.
    Metrics (over the pairs with a preference in the micro-batch): ``actor/dpo_margin`` (mean
    ``beta * h``, the implicit reward margin) and ``actor/dpo_accuracy`` (share with ``h > 0``).
    """
    check_loss_inputs(old_log_prob, log_prob, advantages, response_mask, "dpo")
    if rollout_is_weights is not None:
        raise ValueError(
            "policy loss 'dpo' compares the policy with a reference; rollout_is_weights do not apply"
        )
    _check_pairs(log_prob.shape[0], "policy loss 'dpo'")
    beta = float(_param(config, "dpo_beta", "actor_rollout_ref.actor", "policy loss 'dpo'"))
    loss_type = str(_param(config, "dpo_loss_type", "actor_rollout_ref.actor", "policy loss 'dpo'"))
    mask = response_mask.to(log_prob.dtype)
    log_ratio = ((log_prob - old_log_prob) * mask).sum(dim=-1)
    labels = torch.sign(_row_means(advantages, response_mask)).detach()
    logits = (labels * log_ratio).view(-1, 2).sum(dim=-1)  # chosen minus rejected
    preferred = labels.view(-1, 2)[:, 0] != 0
    pair_losses = torch.where(preferred, dpo_pair_losses(logits, beta, loss_type), torch.zeros_like(logits))
    if global_batch_info is not None:
        pairs = max(global_batch_info.global_seq_count / 2.0, 1.0)
    else:
        pairs = max(float((mask.sum(dim=-1) > 0).sum().item()) / 2.0, 1.0)
    loss = pair_losses.sum() / pairs
    h = logits.detach()[preferred]
    metrics = {
        "actor/dpo_margin": float((beta * h).mean().item()) if h.numel() else 0.0,
        "actor/dpo_accuracy": float((h > 0).float().mean().item()) if h.numel() else 0.0,
    }
    return loss, metrics
