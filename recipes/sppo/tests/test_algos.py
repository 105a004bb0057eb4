"""SPPO's estimators and loss against values worked out by hand (no Ray, no model)."""

import math

import numpy as np
import pytest
import torch
from verl.trainer.ppo.core_algos import GlobalBatchInfo, get_adv_estimator_fn, get_policy_loss_fn
from verl_recipe_sppo.algos import (
    compute_policy_loss_sppo,
    compute_sppo_advantage,
    compute_sppo_win_rate_advantage,
    softmean,
)


class Eta:
    """The actor / algorithm sections as the estimators and the loss read them."""

    def __init__(self, sppo_eta: float, sppo_baseline: str = "group"):
        self.sppo_eta = sppo_eta
        self.sppo_baseline = sppo_baseline


def _outcomes(rewards: list[float], lengths: list[int], width: int = 3):
    """Token-level rewards with each row's reward on its last valid token, and the response mask."""
    mask = torch.zeros(len(rewards), width)
    scores = torch.zeros(len(rewards), width)
    for i, (r, n) in enumerate(zip(rewards, lengths)):
        mask[i, :n] = 1
        scores[i, n - 1] = r
    return scores, mask


def test_softmean_by_hand():
    x = torch.tensor([1.0, 0.0])
    assert softmean(x, 1.0).item() == pytest.approx(math.log((math.e + 1) / 2))  # 0.620115
    assert softmean(x, 0.0).item() == pytest.approx(0.5)
    assert softmean(x, 2.0).item() == pytest.approx(math.log((math.e**2 + 1) / 2) / 2)  # 0.716895
    assert softmean(torch.tensor([0.3, 0.3, 0.3]), 5.0).item() == pytest.approx(0.3)  # a constant stays


def test_sppo_advantage_two_sequences_by_hand():
    # one prompt, two answers: right (r=1, 2 tokens) and wrong (r=0, 1 token); beta = eta = 1
    scores, mask = _outcomes([1.0, 0.0], [2, 1])
    adv, ret = compute_sppo_advantage(scores, mask, index=np.array(["p", "p"], dtype=object), config=Eta(1.0))
    s = math.log((math.e + 1) / 2)  # softmean_1(1, 0) = 0.620115
    assert adv[0].tolist() == pytest.approx([1 - s, 1 - s, 0.0])  # 0.379885 on both valid tokens
    assert adv[1].tolist() == pytest.approx([-s, 0.0, 0.0])  # -0.620115, zero on padding
    assert torch.equal(adv, ret)
    # groups are separate; a group of one has nothing to compare with; beta from the keyword wins
    scores, mask = _outcomes([1.0, 0.0, 1.0], [1, 1, 1])
    adv, _ = compute_sppo_advantage(
        scores, mask, index=np.array(["a", "a", "b"], dtype=object), sppo_eta=0.0, sppo_baseline="group"
    )
    assert adv[:, 0].tolist() == pytest.approx([0.5, -0.5, 0.0])  # beta = 0: r minus the group mean


def test_sppo_advantage_with_upstreams_batch_baseline_by_hand():
    # upstream's setting: one answer per prompt (n=1), the softmean over the whole batch; beta = 1
    scores, mask = _outcomes([1.0, 0.0, 1.0], [1, 2, 1])
    adv, _ = compute_sppo_advantage(scores, mask, index=np.array(["a", "b", "c"], dtype=object), config=Eta(1.0, "batch"))
    s = math.log((2 * math.e + 1) / 3)  # softmean_1(1, 0, 1) = 0.766473
    assert adv[:, 0].tolist() == pytest.approx([1 - s, -s, 1 - s]) and adv[1, 1].item() == pytest.approx(-s)
    # no index needed; beta = 0 is the batch mean
    adv, _ = compute_sppo_advantage(scores, mask, sppo_eta=0.0, sppo_baseline="batch")
    assert adv[:, 0].tolist() == pytest.approx([1 / 3, -2 / 3, 1 / 3])
    with pytest.raises(ValueError, match="sppo_baseline='prompt'"):
        compute_sppo_advantage(scores, mask, sppo_eta=1.0, sppo_baseline="prompt")


def test_sppo_win_rate_advantage_by_hand():
    scores, mask = _outcomes([1.0, 0.0], [1, 2])
    adv, _ = compute_sppo_win_rate_advantage(scores, mask, index=np.array(["p", "p"], dtype=object))
    # P_hat(y1 > y2) = 1, P_hat(y2 > y1) = 0: minus 1/2
    assert adv[:, 0].tolist() == pytest.approx([0.5, -0.5]) and adv[1, 1].item() == pytest.approx(-0.5)
    scores, mask = _outcomes([1.0, 1.0, 0.0, 0.0], [1, 1, 1, 1])
    adv, _ = compute_sppo_win_rate_advantage(scores, mask, index=np.array(["q", "q", "q", "z"], dtype=object))
    # y1 vs (y2 tie, y3 win) = (1/2 + 1) / 2 = 3/4 -> 1/4; y3 loses both -> 0 -> -1/2; z alone -> 0
    assert adv[:, 0].tolist() == pytest.approx([0.25, 0.25, -0.5, 0.0])


def test_sppo_loss_two_sequences_by_hand():
    # seq 1: two tokens, log pi = (-1.0, -2.0), log pi_old = (-1.5, -2.0): log-ratio 0.5
    # seq 2: one token, log pi = -0.5, log pi_old = -0.3: log-ratio -0.2
    log_prob = torch.tensor([[-1.0, -2.0], [-0.5, -9.0]], requires_grad=True)
    old = torch.tensor([[-1.5, -2.0], [-0.3, -4.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    s = math.log((math.e + 1) / 2)
    adv = torch.tensor([[1 - s, 1 - s], [-s, 0.0]])  # the sppo advantages of the example above
    loss, metrics = compute_policy_loss_sppo(old, log_prob, adv, mask, config=Eta(1.0))
    l1 = (0.5 - (1 - s)) ** 2  # 0.120115^2 = 0.014428
    l2 = (-0.2 + s) ** 2  # 0.420115^2 = 0.176497
    assert loss.item() == pytest.approx((l1 + l2) / 2)  # 0.095462
    loss.backward()
    # d/d log pi_t = 2 (log-ratio - eta A) / 2 sequences on each valid token of the sequence; 0 on padding
    assert log_prob.grad.flatten().tolist() == pytest.approx([0.5 - (1 - s), 0.5 - (1 - s), -0.2 + s, 0.0])
    assert metrics["actor/log_ratio_mean"] == pytest.approx((0.5 - 0.2) / 2)
    assert metrics["actor/preference_mean"] == pytest.approx((1 - s - s) / 2)
    # eta scales the target: eta = 2
    loss2, _ = compute_policy_loss_sppo(old, log_prob.detach(), adv, mask, config=Eta(2.0))
    assert loss2.item() == pytest.approx(((0.5 - 2 * (1 - s)) ** 2 + (-0.2 + 2 * s) ** 2) / 2)


def test_sppo_loss_over_micro_batches_sums_to_the_whole_batch():
    g = torch.Generator().manual_seed(0)
    log_prob, old, adv = (torch.randn(4, 3, generator=g) for _ in range(3))
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1], [1, 1, 0]], dtype=torch.float32)
    whole, _ = compute_policy_loss_sppo(old, log_prob, adv, mask, config=Eta(1.0))
    info = GlobalBatchInfo.from_mask(mask)
    parts = [
        compute_policy_loss_sppo(
            old[i : i + 2],
            log_prob[i : i + 2],
            adv[i : i + 2],
            mask[i : i + 2],
            config=Eta(1.0),
            global_batch_info=info,
        )[0]
        for i in (0, 2)
    ]
    assert (parts[0] + parts[1]).item() == pytest.approx(whole.item())


def test_registered_under_upstream_names_and_a_config_without_eta_is_named():
    assert get_adv_estimator_fn("sppo") is compute_sppo_advantage
    assert get_adv_estimator_fn("sppo_win_rate") is compute_sppo_win_rate_advantage
    assert get_policy_loss_fn("sppo") is compute_policy_loss_sppo
    from verl.trainer.config import load_config

    core_actor = load_config([]).actor_rollout_ref.actor  # core's schema: no sppo_eta
    t = torch.zeros(1, 2)
    with pytest.raises(KeyError, match=r"actor_rollout_ref.actor.sppo_eta.*verl-sppo"):
        compute_policy_loss_sppo(t, t, t, torch.ones(1, 2), config=core_actor)
    with pytest.raises(ValueError, match="index"):
        compute_sppo_advantage(t, torch.ones(1, 2), index=None, config=Eta(1.0))
