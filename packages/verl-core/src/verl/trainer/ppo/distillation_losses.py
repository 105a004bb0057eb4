"""Distillation losses: per-token divergences between the student and a teacher, and the actor's objective.

A divergence is registered under one or more names (``distillation.distillation_loss.loss_mode``) with
`register_distillation_loss` and has one signature::

    per_token, metrics = fn(student_log_probs, student_topk_log_probs, teacher_log_probs, response_mask, config)

- ``student_log_probs`` [B, T]: the student's log-prob of each sampled token (with gradient);
- ``student_topk_log_probs`` [B, T, K]: the student's log-probs at the teacher's top-k token ids (with
  gradient; None for the single-sample estimators);
- ``teacher_log_probs`` [B, T, K]: the teacher's top-k log-probs, or [B, T, 1] its log-prob of the
  sampled token for the estimators;
- ``config``: ``distillation.distillation_loss`` (read by attribute).

It returns the per-token divergence [B, T] and metrics (floats, means over the valid tokens).

Registered (upstream's names, plus GKD's generalised JSD):

- ``k1``/``kl``, ``k2``/``mse``, ``k3``/``low_var_kl``, ``abs``: reverse KL(student || teacher) estimated
  on the sampled token (``core_algos.kl_penalty`` with the teacher as the reference). ``k1``'s gradient does
  not depend on the teacher, so it is only valid as a reward (``use_policy_gradient``).
- ``forward_kl_topk``: sum over the teacher's top-k tokens of p_T (log p_T - log p_S), clamped at 0 (the
  truncated sum can dip below 0), with ``log_prob_min_clamp`` applied to both log-probs first.
- ``jsd_topk``: the generalised Jensen-Shannon divergence of GKD (https://arxiv.org/abs/2306.13649) over
  the teacher's top-k tokens plus one bucket holding the rest of each distribution's mass, with
  ``jsd_beta`` = b: b KL(T || M) + (1 - b) KL(S || M), M = b T + (1 - b) S; b = 0 is forward KL(T || S),
  b = 1 reverse KL(S || T) (TRL's convention).

`compute_distillation_loss` turns the divergence into the actor's distillation term: aggregated like the
policy loss (supervised, ``use_policy_gradient=false``), or as the advantage -divergence of a policy loss
(``use_policy_gradient=true``; https://thinkingmachines.ai/blog/on-policy-distillation/).
`combine_losses` adds it to the task policy loss (``use_task_rewards``, ``distillation_loss_coef``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from verl.trainer.ppo.kl import kl_penalty
from verl.trainer.ppo.loss_agg import GlobalBatchInfo, agg_loss
from verl.trainer.ppo.policy_losses import PolicyLossConfig, get_policy_loss_fn
from verl.utils import torch_functional as verl_F
from verl.utils.registry import Registry

DivergenceFn = Callable[..., tuple[torch.Tensor, dict[str, float]]]

DISTILLATION_LOSS_REGISTRY: Registry[DivergenceFn] = Registry("distillation loss")
DISTILLATION_SETTINGS_REGISTRY: dict[str, DistillationLossSettings] = {}

ESTIMATORS = ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3")
# keeps log(1 - top-k mass) finite when the top-k tokens hold all the mass
_TAIL_EPS = 1e-6


@dataclass(frozen=True)
class DistillationLossSettings:
    """What a registered divergence needs from the teacher: its top-k distribution (``use_topk``) or the
    log-prob of the sampled token (``use_estimator``); exactly one."""

    names: tuple[str, ...]
    use_topk: bool = False
    use_estimator: bool = False

    def __post_init__(self) -> None:
        if self.use_topk == self.use_estimator:
            raise ValueError(
                f"distillation loss {self.names}: exactly one of use_topk, use_estimator must be true"
            )


def register_distillation_loss(settings: DistillationLossSettings) -> Callable[[DivergenceFn], DivergenceFn]:
    """Decorator: register a divergence under every name of ``settings.names``."""

    def decorator(fn: DivergenceFn) -> DivergenceFn:
        for name in settings.names:
            DISTILLATION_LOSS_REGISTRY.register(name)(fn)
            DISTILLATION_SETTINGS_REGISTRY[name] = settings
        return fn

    return decorator


def get_distillation_loss_fn(name: str) -> DivergenceFn:
    """The divergence registered as ``name``; an unknown name lists the known ones."""
    return DISTILLATION_LOSS_REGISTRY.get(name)


def get_distillation_loss_settings(name: str) -> DistillationLossSettings:
    get_distillation_loss_fn(name)  # the registry's error for an unknown name
    return DISTILLATION_SETTINGS_REGISTRY[name]


def teacher_topk(config: Any) -> int:
    """The log-probs a teacher returns per token for ``distillation.distillation_loss`` ``config``: its
    ``topk`` largest for a top-k divergence, else 0 (the sampled token's only)."""
    return int(config.topk) if get_distillation_loss_settings(str(config.loss_mode)).use_topk else 0


def _mean(x: torch.Tensor, mask: torch.Tensor) -> float:
    return float(verl_F.masked_mean(x.detach(), mask).item())


def _clamped(log_probs: torch.Tensor, config: Any) -> torch.Tensor:
    floor = config.log_prob_min_clamp
    return log_probs if floor is None else log_probs.clamp_min(float(floor))


@register_distillation_loss(DistillationLossSettings(names=ESTIMATORS, use_estimator=True))
def reverse_kl_estimator(
    student_log_probs: torch.Tensor,
    student_topk_log_probs: torch.Tensor | None,
    teacher_log_probs: torch.Tensor,
    response_mask: torch.Tensor,
    config: Any,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Reverse KL(student || teacher) estimated on the sampled token (``kl_penalty``'s estimators)."""
    teacher = teacher_log_probs[..., 0] if teacher_log_probs.dim() == 3 else teacher_log_probs
    per_token = kl_penalty(student_log_probs, teacher.to(student_log_probs.dtype), config.loss_mode)
    return per_token, {"distillation/abs_loss": _mean(per_token.abs(), response_mask)}


def _masses(student: torch.Tensor, teacher: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
    return {
        "distillation/student_mass": _mean(student.exp().sum(-1), mask),
        "distillation/teacher_mass": _mean(teacher.exp().sum(-1), mask),
    }


@register_distillation_loss(DistillationLossSettings(names=("forward_kl_topk",), use_topk=True))
def forward_kl_topk(
    student_log_probs: torch.Tensor,
    student_topk_log_probs: torch.Tensor | None,
    teacher_log_probs: torch.Tensor,
    response_mask: torch.Tensor,
    config: Any,
) -> tuple[torch.Tensor, dict[str, float]]:
    """sum_k p_T(k) (log p_T(k) - log p_S(k)) over the teacher's top-k tokens, clamped at 0."""
    student = _clamped(student_topk_log_probs.float(), config)
    teacher = _clamped(teacher_log_probs.float(), config)
    return _kl(teacher, student).clamp_min(0.0), _masses(student, teacher, response_mask)


def _with_tail(log_probs: torch.Tensor) -> torch.Tensor:
    """[..., K] log-probs -> [..., K + 1]: the K tokens and one bucket with the remaining mass."""
    tail = (1.0 - log_probs.exp().sum(-1, keepdim=True)).clamp_min(_TAIL_EPS)
    return torch.cat([log_probs, tail.log()], dim=-1)


def _kl(log_p: torch.Tensor, log_q: torch.Tensor) -> torch.Tensor:
    return (log_p.exp() * (log_p - log_q)).sum(-1)


@register_distillation_loss(DistillationLossSettings(names=("jsd_topk",), use_topk=True))
def jsd_topk(
    student_log_probs: torch.Tensor,
    student_topk_log_probs: torch.Tensor | None,
    teacher_log_probs: torch.Tensor,
    response_mask: torch.Tensor,
    config: Any,
) -> tuple[torch.Tensor, dict[str, float]]:
    """GKD's generalised JSD with ``jsd_beta`` over the teacher's top-k tokens plus a tail bucket."""
    student = _clamped(student_topk_log_probs.float(), config)
    teacher = _clamped(teacher_log_probs.float(), config)
    s, t = _with_tail(student), _with_tail(teacher)
    beta = float(config.jsd_beta)
    if beta == 0.0:
        per_token = _kl(t, s)
    elif beta == 1.0:
        per_token = _kl(s, t)
    else:
        m = torch.logsumexp(torch.stack([t + math.log(beta), s + math.log(1.0 - beta)]), dim=0)
        per_token = beta * _kl(t, m) + (1.0 - beta) * _kl(s, m)
    return per_token, _masses(student, teacher, response_mask)


def compute_distillation_loss(
    *,
    student_log_probs: torch.Tensor,
    student_topk_log_probs: torch.Tensor | None,
    teacher_log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str,
    config: Any,
    rollout_is_weights: torch.Tensor | None = None,
    global_batch_info: GlobalBatchInfo | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The distillation term of the actor's loss (before ``distillation_loss_coef``) and its metrics.

    The divergence is clamped to [-loss_max_clamp, loss_max_clamp] when set (k1 can be negative), then
    aggregated with ``loss_agg_mode`` (supervised), or with ``use_policy_gradient`` passed as the
    advantage -divergence (no gradient through it) to the policy loss ``policy_loss_mode`` with the
    section's own ``clip_ratio*`` and the old log-probs of the sampling policy.
    """
    fn = get_distillation_loss_fn(config.loss_mode)
    per_token, metrics = fn(student_log_probs, student_topk_log_probs, teacher_log_probs, response_mask, config)
    metrics["distillation/divergence"] = _mean(per_token, response_mask)
    if config.loss_max_clamp is not None:
        bound = float(config.loss_max_clamp)
        per_token = per_token.clamp(min=-bound, max=bound)
    if not config.use_policy_gradient:
        loss = agg_loss(per_token, response_mask, loss_agg_mode, global_batch_info=global_batch_info)
        return loss, metrics
    pg_config = PolicyLossConfig(
        loss_mode=config.policy_loss_mode,
        clip_ratio=float(config.clip_ratio),
        clip_ratio_low=config.clip_ratio_low,
        clip_ratio_high=config.clip_ratio_high,
    )
    loss, pg_metrics = get_policy_loss_fn(config.policy_loss_mode)(
        old_log_prob=old_log_probs, log_prob=student_log_probs, advantages=-per_token.detach(),
        response_mask=response_mask, loss_agg_mode=loss_agg_mode, config=pg_config,
        rollout_is_weights=rollout_is_weights, global_batch_info=global_batch_info,
    )
    metrics.update({f"distillation/{k.removeprefix('actor/')}": v for k, v in pg_metrics.items()})
    return loss, metrics


def combine_losses(policy_loss: torch.Tensor | None, distillation_loss: torch.Tensor, config: Any) -> torch.Tensor:
    """The actor's loss: ``policy_loss + distillation_loss_coef * distillation_loss`` with
    ``use_task_rewards``, else the distillation term alone (the coefficient then does not apply, as upstream)."""
    if not config.use_task_rewards:
        return distillation_loss
    if policy_loss is None:
        raise ValueError("distillation_loss.use_task_rewards=true needs the task policy loss; got None")
    return policy_loss + float(config.distillation_loss_coef) * distillation_loss
