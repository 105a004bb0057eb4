"""DPPO (dppo_tv, dppo_kl) and DRO against values worked out by hand / in plain Python (math, no torch)."""

import math

import pytest
import torch
from verl.trainer.ppo import core_algos
from verl.trainer.ppo.core_algos import PolicyLossConfig

# five tokens chosen to hit every branch of the trust regions (p = new prob, q = old prob)
LOGP = [-0.5, -1.0, -2.0, -0.1, -3.0, -0.05]
OLD = [-1.0, -1.0, -1.5, -3.0, -0.2, -2.0]
ADV = [1.0, -2.0, 1.5, 1.0, -1.0, -1.0]


def _tensors(mask=None):
    log_prob = torch.tensor([LOGP], dtype=torch.float64, requires_grad=True)
    old = torch.tensor([OLD], dtype=torch.float64)
    adv = torch.tensor([ADV], dtype=torch.float64)
    mask = torch.tensor([mask or [1.0] * len(LOGP)], dtype=torch.float64)
    return log_prob, old, adv, mask


def _expected(valid: list[bool], clip_c: float, mask: list[float]):
    """token-mean loss, gradient d loss / d log p, clipfrac, clipfrac_lower, ppo_kl in plain Python."""
    n = sum(mask)
    losses, grads, trunc_flags = [], [], []
    for lp, old, a, v, m in zip(LOGP, OLD, ADV, valid, mask):
        ratio = math.exp(lp - old)
        w = min(ratio, clip_c)
        losses.append(-a * w * lp * v * m)
        grads.append(-a * w * v * m / n)
        trunc_flags.append(ratio > clip_c and v)
    loss = sum(losses) / n
    clipfrac = sum(m for v, m in zip(valid, mask) if not v) / n
    lower = sum(m for t, m in zip(trunc_flags, mask) if t) / n
    ppo_kl = sum((o - lp) * m for lp, o, m in zip(LOGP, OLD, mask)) / n
    return loss, grads, clipfrac, lower, ppo_kl


def test_dppo_tv_by_hand():
    cfg = PolicyLossConfig(clip_ratio_low=0.2, clip_ratio_high=0.3, clip_ratio_c=3.0)
    p = [math.exp(x) for x in LOGP]
    q = [math.exp(x) for x in OLD]
    # token 0: p - q = 0.2387 <= 0.3 (A > 0) valid; 1: p = q valid; 2: p - q < 0 (A > 0) valid;
    # 3: p - q = 0.855 > 0.3 with A > 0 -> masked; 4: p - q = -0.769 < -0.2 with A < 0 -> masked;
    # 5: p - q = +0.82 with A < 0 -> valid (ratio 7.03 truncated at 3)
    valid = [True, True, True, False, False, True]
    assert [(a > 0 and pi - qi <= 0.3) or (a <= 0 and pi - qi >= -0.2) for a, pi, qi in zip(ADV, p, q)] == valid
    log_prob, old, adv, mask = _tensors()
    loss, metrics = core_algos.get_policy_loss_fn("dppo_tv")(old, log_prob, adv, mask, "token-mean", cfg)
    want_loss, want_grad, clipfrac, lower, ppo_kl = _expected(valid, 3.0, [1.0] * 6)
    # the hand value of token 0: -1 * e^0.5 * (-0.5) = 0.8244; token 5: -(-1) * 3 * (-0.05) = -0.15
    assert -1 * math.exp(0.5) * -0.5 == pytest.approx(0.82436, abs=1e-5)
    assert loss.item() == pytest.approx(want_loss)
    loss.backward()
    assert log_prob.grad[0].tolist() == pytest.approx(want_grad)
    assert log_prob.grad[0, 3].item() == 0.0 and log_prob.grad[0, 4].item() == 0.0  # outside the region
    assert metrics["actor/pg_clipfrac"] == pytest.approx(clipfrac) == pytest.approx(2 / 6)
    assert metrics["actor/pg_clipfrac_lower"] == pytest.approx(lower) == pytest.approx(1 / 6)
    assert metrics["actor/ppo_kl"] == pytest.approx(ppo_kl)


def _binary_kl(p: float, q: float) -> float:
    return q * math.log(q / p) + (1 - q) * math.log((1 - q) / (1 - p))


def test_dppo_kl_by_hand():
    low, high = 0.05, 0.1
    cfg = PolicyLossConfig(clip_ratio=0.1, clip_ratio_low=low, clip_ratio_high=high, clip_ratio_c=3.0)
    p = [math.exp(x) for x in LOGP]
    q = [math.exp(x) for x in OLD]
    d = [_binary_kl(pi, qi) for pi, qi in zip(p, q)]
    # token 0: D = 0.1157 > 0.1 and p > q with A > 0 -> masked; 2: p < q (A > 0) valid whatever D;
    # 3: D = 2.56 with A > 0 -> masked; 4: D = 1.93 > 0.05, p < q with A < 0 -> masked; 5: p > q (A < 0) valid
    assert d[0] == pytest.approx(0.36788 * -0.5 + 0.63212 * math.log(0.63212 / 0.39347), abs=1e-4)  # 0.1157
    valid = [(a > 0 and (di <= high or pi <= qi)) or (a <= 0 and (di <= low or pi >= qi))
             for a, di, pi, qi in zip(ADV, d, p, q)]
    assert valid == [False, True, True, False, False, True]
    mask = [1.0, 1.0, 1.0, 1.0, 1.0, 0.0]  # the last token is padding
    log_prob, old, adv, mask_t = _tensors(mask)
    loss, metrics = core_algos.get_policy_loss_fn("dppo_kl")(old, log_prob, adv, mask_t, "token-mean", cfg)
    want_loss, want_grad, clipfrac, lower, ppo_kl = _expected(valid, 3.0, mask)
    assert loss.item() == pytest.approx(want_loss)
    loss.backward()
    assert log_prob.grad[0].tolist() == pytest.approx(want_grad)
    assert metrics["actor/pg_clipfrac"] == pytest.approx(clipfrac) == pytest.approx(3 / 5)
    assert metrics["actor/pg_clipfrac_lower"] == pytest.approx(lower) == 0.0
    assert metrics["actor/ppo_kl"] == pytest.approx(ppo_kl)


def test_dppo_thresholds_default_to_clip_ratio_and_weights_multiply():
    # clip_ratio_low/high None -> clip_ratio = 0.3 on both sides: token 4 (p - q = -0.769) still masked
    cfg = PolicyLossConfig(clip_ratio=0.3, clip_ratio_low=None, clip_ratio_high=None, clip_ratio_c=20.0)
    log_prob, old, adv, mask = _tensors()
    weights = torch.tensor([[2.0, 1.0, 0.5, 1.0, 1.0, 1.0]], dtype=torch.float64)
    loss, _ = core_algos.compute_policy_loss_dppo_tv(old, log_prob.detach(), adv, mask, "token-sum", cfg,
                                                     rollout_is_weights=weights)
    valid = [True, True, True, False, False, True]
    want = sum(-a * min(math.exp(lp - o), 20.0) * lp * v * w
               for lp, o, a, v, w in zip(LOGP, OLD, ADV, valid, [2.0, 1.0, 0.5, 1.0, 1.0, 1.0]))
    assert loss.item() == pytest.approx(want)


def test_dro_by_hand_through_the_registry():
    # DRO: -(A log p - beta/2 (log p - log q)^2); beta = 0.4, token-mean over 6 tokens
    beta = 0.4
    cfg = PolicyLossConfig(loss_mode="dro", dro_beta=beta)
    log_prob, old, adv, mask = _tensors()
    loss, _ = core_algos.get_policy_loss_fn("dro")(old, log_prob, adv, mask, "token-mean", cfg)
    want = sum(-(a * lp - beta / 2 * (lp - o) ** 2) for lp, o, a in zip(LOGP, OLD, ADV)) / 6
    # token 0 by hand: -(1 * -0.5 - 0.2 * 0.25) = 0.55
    assert -(1 * -0.5 - 0.2 * 0.5**2) == pytest.approx(0.55)
    assert loss.item() == pytest.approx(want)
    loss.backward()
    assert log_prob.grad[0].tolist() == pytest.approx([-(a - beta * (lp - o)) / 6 for lp, o, a in zip(LOGP, OLD, ADV)])


def test_dppo_and_dro_are_registered_with_upstream_names():
    for name in ("dppo_tv", "dppo_kl", "dro"):
        assert name in core_algos.POLICY_LOSS_REGISTRY
    assert core_algos.POLICY_LOSS_REGISTRY["dppo_tv"] is core_algos.compute_policy_loss_dppo_tv
