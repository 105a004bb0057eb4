"""PRIME's formulas against values worked out by hand (the arithmetic is in the comments)."""

import math

import numpy as np
import pytest
import torch
from verl_recipe_prime.prime_core_algos import (
    compute_ce_dpo_loss_rm,
    compute_dpo_abs_accuracy,
    compute_dpo_accuracy,
    compute_prime_rloo_advantage,
    implicit_process_reward,
    last_token_mask,
    masked_rloo,
    prime_norm,
)

MASK = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])
Q = torch.tensor([[2.0, -1.0, 4.0, 9.0], [1.0, 3.0, 7.0, 7.0]])  # log-ratios; 9 and 7s are padding


def test_last_token_mask_marks_each_rows_last_response_token():
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0], [1, 0, 1, 0]])
    assert last_token_mask(mask).int().tolist() == [[0, 0, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0], [0, 0, 1, 0]]


def test_implicit_process_reward_token_and_whole():
    # token: beta * q on response tokens, 0 on padding: 0.5 * [2, -1, 4] and 0.5 * [1, 3]
    token = implicit_process_reward(Q, MASK, beta=0.5, granularity="token")
    assert token.tolist() == [[1.0, -0.5, 2.0, 0.0], [0.5, 1.5, 0.0, 0.0]]
    # whole: the sum on the last response token: 0.5 * 5 = 2.5 at t=2, 0.5 * 4 = 2 at t=1
    whole = implicit_process_reward(Q, MASK, beta=0.5, granularity="whole")
    assert whole.tolist() == [[0.0, 0.0, 2.5, 0.0], [0.0, 2.0, 0.0, 0.0]]
    with pytest.raises(ValueError, match="prime_granularity='step'"):
        implicit_process_reward(Q, MASK, beta=0.5, granularity="step")


def test_prime_norm_divides_by_the_largest_return_to_go():
    scores = torch.tensor([[1.0, -0.5, 2.0, 0.0], [0.5, 1.5, 0.0, 0.0]])
    # returns-to-go: row 0: [2.5, 1.5, 2.0, 0], row 1: [2.0, 1.5, 0, 0] -> max |.| = 2.5
    out = prime_norm(scores, MASK, "batch_norm")
    torch.testing.assert_close(out, scores / (2.5 + 1e-6))
    # a negative return-to-go can be the largest in magnitude
    neg = torch.tensor([[-3.0, 1.0, 0.0, 0.0]])
    torch.testing.assert_close(
        prime_norm(neg, torch.tensor([[1, 1, 0, 0]]), "batch_norm"), neg / (2.0 + 1e-6)
    )
    assert prime_norm(scores, MASK, "none") is scores


def test_ce_loss_is_bce_of_sigmoid_beta_sum():
    # sum q over the response: row 0: 2 - 1 + 4 = 5, row 1: 1 + 3 = 4; beta 0.5 -> logits 2.5 and 2.0
    acc = torch.tensor([1.0, 0.0])
    p0, p1 = 1 / (1 + math.exp(-2.5)), 1 / (1 + math.exp(-2.0))
    expected = (-math.log(p0) - math.log(1 - p1)) / 2  # right answer labelled 1, wrong one 0
    assert compute_ce_dpo_loss_rm(Q, acc, MASK, beta=0.5).item() == pytest.approx(expected, rel=1e-6)
    summed = compute_ce_dpo_loss_rm(Q, acc, MASK, beta=0.5, reduction="sum").item()
    assert summed == pytest.approx(2 * expected, rel=1e-6)
    # a soft label: BCE(p, 0.25) = -(0.25 log p + 0.75 log(1 - p))
    soft = compute_ce_dpo_loss_rm(Q[:1], torch.tensor([0.25]), MASK[:1], beta=0.5).item()
    assert soft == pytest.approx(-(0.25 * math.log(p0) + 0.75 * math.log(1 - p0)), rel=1e-6)


def test_ce_loss_gradient_raises_the_right_answers_log_ratio():
    q = torch.zeros(2, 3, requires_grad=True)
    loss = compute_ce_dpo_loss_rm(q, torch.tensor([1.0, 0.0]), torch.ones(2, 3), beta=0.05)
    loss.backward()
    # d/dq_t of mean BCE = beta * (sigmoid(0) - acc) / 2 = 0.05 * (0.5 - acc) / 2
    torch.testing.assert_close(q.grad, torch.tensor([[-0.0125] * 3, [0.0125] * 3]))


def test_dpo_accuracy_pairs_within_groups():
    mask = torch.ones(6, 1)
    # group a: sums [3, 1, 2] with labels [1, 0, 0]: pairs (0,1) right, (0,2) right, (1,2) no label
    # difference -> 2/2 = 1.0; group b: sums [0, 5] labels [1, 0]: ordered wrong -> 0.0;
    # group c: one answer -> no pair -> 0.5. Mean over groups: (1 + 0 + 0.5) / 3 = 0.5
    q = torch.tensor([[3.0], [1.0], [2.0], [0.0], [5.0], [4.0]])
    acc = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.0, 1.0])
    uids = np.array(["a", "a", "a", "b", "b", "c"], dtype=object)
    assert compute_dpo_accuracy(q, acc, mask, uids) == pytest.approx(0.5)
    # pairs are weighted by the label difference: labels [1, 0.5, 0] with sums [0, 1, 2] order every pair
    # wrong, with the sums reversed every pair right
    g = np.array(["x", "x", "x"], dtype=object)
    soft = torch.tensor([1.0, 0.5, 0.0])
    assert compute_dpo_accuracy(torch.tensor([[0.0], [1.0], [2.0]]), soft, torch.ones(3, 1), g) == 0.0
    assert compute_dpo_accuracy(torch.tensor([[2.0], [1.0], [0.0]]), soft, torch.ones(3, 1), g) == 1.0
    # (0,1) right with weight 0.5, (0,2) right with weight 1, (1,2) wrong with weight 0.5 -> 1.5 / 2
    assert compute_dpo_accuracy(torch.tensor([[2.0], [0.0], [1.0]]), soft, torch.ones(3, 1), g) == 0.75


def test_dpo_abs_accuracy_is_the_sign_agreement():
    q = torch.tensor([[2.0, -1.0], [-0.5, 0.0], [1.0, 0.0], [-3.0, 1.0]])
    mask = torch.tensor([[1, 1], [1, 0], [1, 0], [1, 1]])
    # sums 1, -0.5, 1, -2 vs labels 1, 0, 0, 1 -> right, right, wrong, wrong
    assert compute_dpo_abs_accuracy(q, torch.tensor([1.0, 0.0, 0.0, 1.0]), mask) == 0.5


def test_masked_rloo_one_reward_per_row_is_leave_one_out():
    # outcome on the last token of 3 answers to one prompt and 2 to another
    mask = torch.tensor([[0, 1], [1, 0], [0, 1], [0, 1], [0, 1]]).bool()
    r = torch.tensor([[0.0, 1.0], [1.0, 0.0], [0.0, 0.0], [0.0, 1.0], [0.0, 0.0]])
    uids = np.array(["p", "p", "p", "q", "q"], dtype=object)
    out = masked_rloo(r, mask, uids)
    # p: 1 - (1+0)/2 = 0.5, 1 - 0.5 = 0.5, 0 - 1 = -1; q: 1 - 0 = 1, 0 - 1 = -1
    assert out.tolist() == [[0.0, 0.5], [0.5, 0.0], [0.0, -1.0], [0.0, 1.0], [0.0, -1.0]]


def test_masked_rloo_dense_rewards_use_the_per_row_mean_baseline():
    # 2 rows of one group, token rewards on the mask; row means 2 and 1 -> baseline (2 + 1) / 1 = 3,
    # scale n/(n-1) = 2: row 0: 2*[1, 3] - 3 = [-1, 3]; row 1: 2*[1] - 3 = [-1]
    mask = torch.tensor([[1, 1], [1, 0]]).bool()
    r = torch.tensor([[1.0, 3.0], [1.0, 8.0]])  # the 8 is padding: ignored
    out = masked_rloo(r, mask, np.array(["g", "g"], dtype=object))
    assert out.tolist() == [[-1.0, 3.0], [-1.0, 0.0]]
    # a group of one has no baseline: 0
    assert masked_rloo(r[:1], mask[:1], np.array(["s"], dtype=object)).tolist() == [[0.0, 0.0]]


def _whiten(values: list[float]) -> list[float]:
    mean = sum(values) / len(values)
    var = sum((v - mean) ** 2 for v in values) / (len(values) - 1)  # unbiased, as core's masked_var
    return [(v - mean) / math.sqrt(var + 1e-8) for v in values]


def test_combined_advantage_by_hand():
    # one prompt, two answers of two tokens each; outcome acc [1, 0]; implicit rewards [[0.2, 0.4], [0.1, -0.3]]
    mask = torch.ones(2, 2, dtype=torch.long)
    uids = np.array(["u", "u"], dtype=object)
    acc = torch.tensor([1.0, 0.0])
    rm = torch.tensor([[0.2, 0.4], [0.1, -0.3]])
    adv, ret = compute_prime_rloo_advantage(mask, uids, acc, rm, reward_gt_coef=5.0, reward_dpo_coef=2.0)
    # process: row means 0.3, -0.1, baseline (0.3 - 0.1)/1 = 0.2, scale 2:
    #   row 0: [0.4 - 0.2, 0.8 - 0.2] = [0.2, 0.6]; row 1: [0.2 - 0.2, -0.6 - 0.2] = [0.0, -0.8]; x2
    # outcome (last token): 1 - 0 = 1, 0 - 1 = -1; x5
    # total: row 0: [0.4, 1.2 + 5] = [0.4, 6.2]; row 1: [0.0, -1.6 - 5] = [0.0, -6.6]
    # returns-to-go: row 0: [6.6, 6.2]; row 1: [-6.6, -6.6]
    torch.testing.assert_close(ret, torch.tensor([[6.6, 6.2], [-6.6, -6.6]]))
    torch.testing.assert_close(adv, torch.tensor(_whiten([6.6, 6.2, -6.6, -6.6])).reshape(2, 2))


def test_combined_advantage_sources_and_padding():
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1]])
    uids = np.array(["a", "a", "b"], dtype=object)
    acc = torch.tensor([1.0, 0.0, 1.0])
    rm = torch.randn(3, 3)
    # outcome only (the RLOO baseline arm, PRM off): group a: +1 / -1 at the last tokens, b alone: 0
    adv, ret = compute_prime_rloo_advantage(mask, uids, acc, None, reward_gt_coef=5.0, reward_dpo_coef=5.0)
    assert ret.tolist() == [[5.0, 5.0, 0.0], [-5.0, 0.0, 0.0], [0.0, 0.0, 0.0]]
    torch.testing.assert_close(
        adv[mask.bool()], torch.tensor(_whiten([5.0, 5.0, -5.0, 0.0, 0.0, 0.0])), rtol=1e-5, atol=1e-5
    )
    assert (adv[~mask.bool()] == 0).all()
    # a zero coefficient drops a source: dpo 0 -> same as outcome only
    adv0, _ = compute_prime_rloo_advantage(mask, uids, acc, rm, reward_gt_coef=5.0, reward_dpo_coef=0.0)
    torch.testing.assert_close(adv0, adv)
    with pytest.raises(ValueError, match="no reward source"):
        compute_prime_rloo_advantage(mask, uids, acc, None, reward_gt_coef=0.0, reward_dpo_coef=5.0)
