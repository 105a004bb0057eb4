"""The distillation losses against values worked out by hand / in plain Python (math only, no torch)."""

import math
from types import SimpleNamespace

import pytest
import torch
from verl.trainer.ppo.distillation_losses import (
    DISTILLATION_LOSS_REGISTRY,
    combine_losses,
    compute_distillation_loss,
    get_distillation_loss_settings,
)
from verl.utils.registry import UnknownNameError


def _cfg(**kw):
    base = dict(loss_mode="k3", topk=2, use_task_rewards=True, distillation_loss_coef=1.0, loss_max_clamp=None,
                log_prob_min_clamp=None, use_policy_gradient=False, policy_loss_mode="vanilla", clip_ratio=0.2,
                clip_ratio_low=0.2, clip_ratio_high=0.2, jsd_beta=0.5, lmbda=1.0)
    return SimpleNamespace(**{**base, **kw})


def _t(rows, grad=False):
    return torch.tensor(rows, dtype=torch.float64, requires_grad=grad)


def _loss(cfg, student, teacher, student_topk=None, old=None, mask=None, mode="token-mean"):
    mask = torch.ones_like(student) if mask is None else mask
    return compute_distillation_loss(
        student_log_probs=student, student_topk_log_probs=student_topk, teacher_log_probs=teacher,
        old_log_probs=student.detach() if old is None else old, response_mask=mask, loss_agg_mode=mode, config=cfg,
    )


def test_k3_reverse_kl_supervised_value_and_gradient():
    # k3 = e^(t - s) - (t - s) - 1: token 0 (s=-1, t=-1.5): e^-0.5 + 0.5 - 1 = 0.10653; token 1 equal -> 0
    student = _t([[-1.0, -0.5]], grad=True)
    teacher = _t([[[-1.5], [-0.5]]])
    loss, metrics = _loss(_cfg(loss_mode="k3"), student, teacher)
    assert math.exp(-0.5) + 0.5 - 1 == pytest.approx(0.10653, abs=1e-5)
    assert loss.item() == pytest.approx((math.exp(-0.5) - 0.5) / 2)
    loss.backward()
    # d k3 / d s = 1 - e^(t - s); token-mean over 2 tokens
    assert student.grad[0].tolist() == pytest.approx([(1 - math.exp(-0.5)) / 2, 0.0])
    assert metrics["distillation/divergence"] == pytest.approx((math.exp(-0.5) - 0.5) / 2)


def test_k1_as_a_dense_reward_through_the_ppo_loss():
    # k1 = s - t = [0.5, 0]; advantage = -k1; old = s (ratio 1): loss = mean(-A * 1) = 0.25, dL/ds = -A/2
    student = _t([[-1.0, -0.5]], grad=True)
    teacher = _t([[[-1.5], [-0.5]]])
    loss, metrics = _loss(_cfg(loss_mode="k1", use_policy_gradient=True), student, teacher)
    assert loss.item() == pytest.approx(0.25)
    loss.backward()
    assert student.grad[0].tolist() == pytest.approx([0.25, 0.0])
    assert metrics["distillation/pg_clipfrac"] == 0.0
    # a stale old policy: old = s - 0.5 -> ratio e^0.5 = 1.649 > 1.2 with A = -0.5 < 0: the unclipped
    # -A r = 0.8244 is the larger (and under the dual clip 3 * 0.5): token 0 loss 0.8244, token 1 0
    old = _t([[-1.5, -0.5]])
    loss, _ = _loss(_cfg(loss_mode="k1", use_policy_gradient=True), student.detach(), teacher, old=old)
    assert loss.item() == pytest.approx((0.5 * math.exp(0.5) + 0.0) / 2)


def test_forward_kl_topk_by_hand_and_clamped_at_zero():
    # teacher top-2 probs (0.6, 0.3), student at those ids (0.5, 0.2):
    # 0.6 ln(0.6/0.5) + 0.3 ln(0.3/0.2) = 0.10939 + 0.12164 = 0.23103
    teacher = _t([[[math.log(0.6), math.log(0.3)], [math.log(0.5), math.log(0.1)]]])
    student_topk = _t([[[math.log(0.5), math.log(0.2)], [math.log(0.6), math.log(0.3)]]], grad=True)
    student = _t([[-1.0, -1.0]])
    loss, metrics = _loss(_cfg(loss_mode="forward_kl_topk"), student, teacher, student_topk, mode="token-sum")
    first = 0.6 * math.log(0.6 / 0.5) + 0.3 * math.log(0.3 / 0.2)
    assert first == pytest.approx(0.23103, abs=1e-5)
    # row 2: 0.5 ln(0.5/0.6) + 0.1 ln(0.1/0.3) = -0.2010 < 0 -> clamped to 0
    assert 0.5 * math.log(0.5 / 0.6) + 0.1 * math.log(0.1 / 0.3) < 0
    assert loss.item() == pytest.approx(first)
    loss.backward()
    # d/d log q_k of sum p_k (log p_k - log q_k) = -p_k; the clamped token has no gradient
    assert student_topk.grad[0, 0].tolist() == pytest.approx([-0.6, -0.3])
    assert student_topk.grad[0, 1].tolist() == [0.0, 0.0]
    assert metrics["distillation/teacher_mass"] == pytest.approx((0.9 + 0.6) / 2)
    assert metrics["distillation/student_mass"] == pytest.approx((0.7 + 0.9) / 2)


def test_log_prob_min_clamp_floors_both_sides():
    teacher = _t([[[math.log(0.6), -30.0]]])
    student_topk = _t([[[math.log(0.5), -40.0]]])
    loss, _ = _loss(_cfg(loss_mode="forward_kl_topk", log_prob_min_clamp=-5.0), _t([[-1.0]]), teacher, student_topk)
    # both -30 and -40 floor at -5: the second term is e^-5 * 0
    assert loss.item() == pytest.approx(0.6 * math.log(0.6 / 0.5))


def _kl(p, q):
    return sum(a * math.log(a / b) for a, b in zip(p, q))


@pytest.mark.parametrize("beta", [0.0, 0.5, 0.3, 1.0])
def test_jsd_topk_with_the_tail_bucket(beta):
    t = [0.6, 0.3, 0.1]  # teacher top-2 + the rest
    s = [0.5, 0.2, 0.3]  # student at the teacher's ids + the rest
    if beta == 0.0:
        want = _kl(t, s)  # forward KL
    elif beta == 1.0:
        want = _kl(s, t)  # reverse KL
    else:
        m = [beta * a + (1 - beta) * b for a, b in zip(t, s)]
        want = beta * _kl(t, m) + (1 - beta) * _kl(s, m)
    if beta == 0.5:  # by hand: M = (0.55, 0.25, 0.2); 0.5 * (0.037589 + 0.029356)
        assert want == pytest.approx(0.0334725, abs=1e-6)
    teacher = _t([[[math.log(0.6), math.log(0.3)]]])
    student_topk = _t([[[math.log(0.5), math.log(0.2)]]])
    loss, _ = _loss(_cfg(loss_mode="jsd_topk", jsd_beta=beta), _t([[-1.0]]), teacher, student_topk)
    assert loss.item() == pytest.approx(want, rel=1e-5)


def test_loss_max_clamp_and_combination():
    # k1 = s - t = [3, -4] -> clamped to [2, -2]; as a reward: advantages [-2, 2], token-sum = 2 - 2 = 0
    student = _t([[0.0, -5.0]])
    teacher = _t([[[-3.0], [-1.0]]])
    loss, metrics = _loss(_cfg(loss_mode="k1", use_policy_gradient=True, loss_max_clamp=2.0), student, teacher,
                          mode="token-sum")
    assert loss.item() == pytest.approx(0.0)
    assert metrics["distillation/divergence"] == pytest.approx(-0.5)  # before the clamp
    pg, d = torch.tensor(1.5), torch.tensor(2.0)
    assert combine_losses(pg, d, _cfg(use_task_rewards=True, distillation_loss_coef=0.25)).item() == 2.0
    # without the task reward the coefficient does not apply (as upstream)
    assert combine_losses(None, d, _cfg(use_task_rewards=False, distillation_loss_coef=0.25)).item() == 2.0


def test_registry_settings_and_unknown_names():
    assert get_distillation_loss_settings("k3").use_estimator
    assert get_distillation_loss_settings("low_var_kl").use_estimator
    assert get_distillation_loss_settings("forward_kl_topk").use_topk
    assert get_distillation_loss_settings("jsd_topk").use_topk
    assert {"k1", "kl", "k2", "mse", "k3", "low_var_kl", "abs"} <= set(DISTILLATION_LOSS_REGISTRY)
    with pytest.raises(UnknownNameError, match="forward_kl_topk"):
        get_distillation_loss_settings("forward_kl")
