"""KL estimators, KL coefficient controllers and the KL-in-reward penalty (re-exported by core_algos).

``kl_penalty(logprob, ref_logprob, kl_penalty)`` estimates KL(pi || pi_ref) per token from the
log-probs of sampled tokens (http://joschu.net/blog/kl-approx.html):

- ``kl`` / ``k1``: log pi - log pi_ref
- ``abs``: |log pi - log pi_ref|
- ``mse`` / ``k2``: 0.5 * (log pi - log pi_ref)^2
- ``low_var_kl`` / ``k3``: exp(d) - d - 1 with d = log pi_ref - log pi clamped to [-20, 20], result
  clamped to [-10, 10] (as upstream, for stability)
- a ``+`` suffix (``k1+``, ``k3+``, ...) is straight-through: the value of the named estimator with the
  gradient of ``k2`` (whose gradient is the unbiased KL gradient when the samples are on-policy).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from verl.utils import torch_functional as verl_F

_ALIASES = {"kl": "k1", "k1": "k1", "abs": "abs", "mse": "k2", "k2": "k2", "low_var_kl": "k3", "k3": "k3"}
KL_PENALTY_TYPES = tuple(_ALIASES) + tuple(name + "+" for name in _ALIASES)


def _kl_value(logprob: torch.Tensor, ref_logprob: torch.Tensor, kind: str) -> torch.Tensor:
    diff = logprob - ref_logprob
    if kind == "k1":
        return diff
    if kind == "abs":
        return diff.abs()
    if kind == "k2":
        return 0.5 * diff.square()
    # k3: unbiased, always >= 0, low variance when pi is close to pi_ref
    d = torch.clamp(-diff, min=-20.0, max=20.0)
    return torch.clamp(torch.exp(d) - d - 1, min=-10.0, max=10.0)


def kl_penalty(logprob: torch.Tensor, ref_logprob: torch.Tensor, kl_penalty: str = "kl") -> torch.Tensor:
    """Per-token KL estimate of type ``kl_penalty`` (see module doc); same shape as the inputs."""
    straight_through = kl_penalty.endswith("+")
    base = kl_penalty[:-1] if straight_through else kl_penalty
    if base not in _ALIASES:
        if kl_penalty == "full":
            raise NotImplementedError("kl_penalty='full' needs the full distributions; use k1/k2/k3 instead")
        raise ValueError(f"unknown kl_penalty {kl_penalty!r}; known: {', '.join(KL_PENALTY_TYPES)}")
    value = _kl_value(logprob, ref_logprob, _ALIASES[base])
    if not straight_through:
        return value
    grad_source = 0.5 * (logprob - ref_logprob).square()
    # forward: value; backward: d(k2)
    return value.detach() + grad_source - grad_source.detach()


_kl_penalty_fn = kl_penalty  # compute_kl_in_reward's argument shadows the name (upstream keyword)


class FixedKLController:
    """Constant KL coefficient ``value``."""

    def __init__(self, kl_coef: float):
        self.value = float(kl_coef)

    def update(self, current_kl: float, n_steps: int) -> None:
        """No-op (the coefficient is fixed)."""

    def state_dict(self) -> dict[str, float]:
        return {"value": self.value}

    def load_state_dict(self, state: dict[str, float]) -> None:
        self.value = float(state["value"])


class AdaptiveKLController:
    """Adaptive KL coefficient (Ziegler et al. 2019, https://arxiv.org/abs/1909.08593):

    e = clip(current_kl / target_kl - 1, -0.2, 0.2); value *= 1 + e * n_steps / horizon.
    """

    def __init__(self, init_kl_coef: float, target_kl: float, horizon: int):
        if horizon <= 0 or target_kl <= 0:
            raise ValueError(
                f"adaptive KL control needs horizon > 0 and target_kl > 0, got {horizon=}, {target_kl=}"
            )
        self.value = float(init_kl_coef)
        self.target = float(target_kl)
        self.horizon = horizon

    def update(self, current_kl: float, n_steps: int) -> None:
        """Move the coefficient toward keeping ``current_kl`` at the target; ``n_steps`` = samples seen."""
        error = float(np.clip(current_kl / self.target - 1, -0.2, 0.2))
        self.value *= 1 + error * n_steps / self.horizon

    def state_dict(self) -> dict[str, float]:
        return {"value": self.value}

    def load_state_dict(self, state: dict[str, float]) -> None:
        self.value = float(state["value"])


def get_kl_controller(kl_ctrl: Any) -> FixedKLController | AdaptiveKLController:
    """Controller from ``algorithm.kl_ctrl`` (attributes ``type`` = fixed|adaptive, ``kl_coef``,
    and for adaptive ``target_kl``, ``horizon``)."""
    if kl_ctrl.type == "fixed":
        return FixedKLController(kl_coef=kl_ctrl.kl_coef)
    if kl_ctrl.type == "adaptive":
        return AdaptiveKLController(
            init_kl_coef=kl_ctrl.kl_coef, target_kl=kl_ctrl.target_kl, horizon=kl_ctrl.horizon
        )
    raise ValueError(f"unknown algorithm.kl_ctrl.type {kl_ctrl.type!r}; known: fixed, adaptive")


@torch.no_grad()
def compute_kl_in_reward(
    token_level_scores: torch.Tensor,
    old_log_probs: torch.Tensor,
    ref_log_prob: torch.Tensor,
    response_mask: torch.Tensor,
    kl_ctrl: FixedKLController | AdaptiveKLController,
    kl_penalty: str = "kl",
    update_kl_ctrl: bool = True,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Subtract ``beta * KL`` from the scores (``algorithm.use_kl_in_reward``), as upstream's apply_kl_penalty.

    beta is the controller's value *before* this batch's update. The reported KL is the mean over rows
    of each row's token-mean KL; the controller is then updated with it and ``n_steps`` = batch size.
    Returns ``(token_level_rewards, {"actor/reward_kl_penalty": kl, "actor/reward_kl_penalty_coeff": beta})``.
    """
    mask = response_mask.to(token_level_scores.dtype)
    kld = _kl_penalty_fn(old_log_probs, ref_log_prob, kl_penalty) * mask
    beta = kl_ctrl.value
    token_level_rewards = token_level_scores - beta * kld
    current_kl = float(verl_F.masked_mean(kld, mask, axis=-1).mean().item())
    if update_kl_ctrl:
        kl_ctrl.update(current_kl=current_kl, n_steps=token_level_scores.shape[0])
    return token_level_rewards, {"actor/reward_kl_penalty": current_kl, "actor/reward_kl_penalty_coeff": beta}
