"""SPIN's pair labels and DPO loss against values worked out by hand (no Ray, no model)."""

import math

import numpy as np
import pytest
import torch
from verl.trainer.ppo.core_algos import GlobalBatchInfo, get_adv_estimator_fn, get_policy_loss_fn
from verl_recipe_spin.algos import compute_policy_loss_dpo, compute_spin_pair_labels


class Section:
    """The algorithm / actor sections as the estimator and the loss read them."""

    def __init__(self, **values):
        self.__dict__.update(values)


def _sigmoid(x: float) -> float:
    return 1 / (1 + math.exp(-x))


def _scored(rewards: list[float]) -> tuple[torch.Tensor, torch.Tensor]:
    scores = torch.zeros(len(rewards), 2)
    scores[:, 1] = torch.tensor(rewards)
    return scores, torch.ones(len(rewards), 2)


def test_pair_labels_by_hand():
    scores, mask = _scored([1.0, 0.0, 0.0, 1.0, 1.0, 1.0])
    uids = np.array(["a", "a", "b", "b", "c", "c"], dtype=object)
    adv, ret = compute_spin_pair_labels(
        scores, mask, index=uids, config=Section(spin_mode="reward", spin_ties="first_chosen")
    )
    # the higher score is chosen (+1) whichever row it is in; a tie (upstream's default): the first row
    assert adv[:, 0].tolist() == [1.0, -1.0, -1.0, 1.0, 1.0, -1.0]
    assert torch.equal(adv, ret) and torch.equal(adv[:, 0], adv[:, 1])
    # the option: a tie carries no preference (0, 0)
    adv, _ = compute_spin_pair_labels(scores, mask, index=uids, spin_mode="reward", spin_ties="drop")
    assert adv[:, 0].tolist() == [1.0, -1.0, -1.0, 1.0, 0.0, 0.0]
    # the paper's pairs: the first row (the dataset's target) is preferred whatever the scores say
    adv, _ = compute_spin_pair_labels(scores, mask, index=uids, spin_mode="sft", spin_ties="first_chosen")
    assert adv[:, 0].tolist() == [1.0, -1.0, 1.0, -1.0, 1.0, -1.0]
    with pytest.raises(ValueError, match=r"rows 2 and 3 have different uids \('b', 'x'\)"):
        compute_spin_pair_labels(
            scores, mask, index=np.array(["a", "a", "b", "x", "c", "c"], dtype=object), spin_mode="reward",
            spin_ties="drop",
        )
    with pytest.raises(ValueError, match="3 rows do not form"):
        compute_spin_pair_labels(scores[:3], mask[:3], spin_mode="reward", spin_ties="drop")
    with pytest.raises(ValueError, match="spin_mode='best'"):
        compute_spin_pair_labels(scores, mask, spin_mode="best")
    with pytest.raises(ValueError, match="spin_ties='skip'"):
        compute_spin_pair_labels(scores, mask, spin_mode="reward", spin_ties="skip")


def _pair():
    # chosen (row 0): log pi = (-1.0, -2.0), ref = (-1.5, -2.5) -> log-ratio 1.0
    # rejected (row 1, one token): log pi = -0.5, ref = -0.7 -> log-ratio 0.2; h = 1.0 - 0.2 = 0.8
    log_prob = torch.tensor([[-1.0, -2.0], [-0.5, -3.0]], requires_grad=True)
    ref = torch.tensor([[-1.5, -2.5], [-0.7, -1.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    labels = torch.tensor([[1.0, 1.0], [-1.0, 0.0]])
    return log_prob, ref, mask, labels


def test_dpo_sigmoid_loss_two_sequences_by_hand():
    log_prob, ref, mask, labels = _pair()
    loss, metrics = compute_policy_loss_dpo(
        ref, log_prob, labels, mask, config=Section(dpo_beta=0.1, dpo_loss_type="sigmoid")
    )
    assert loss.item() == pytest.approx(math.log(1 + math.exp(-0.08)))  # -log sigmoid(0.1 * 0.8) = 0.653886
    loss.backward()
    g = 0.1 * _sigmoid(-0.08)  # beta * sigmoid(-beta h) = 0.048001
    assert log_prob.grad.flatten().tolist() == pytest.approx([-g, -g, g, 0.0])  # chosen up, rejected down
    assert metrics == pytest.approx({"actor/dpo_margin": 0.08, "actor/dpo_accuracy": 1.0})
    # the same rows with the preference the other way round: h = -0.8
    swapped, _ = compute_policy_loss_dpo(
        ref, log_prob.detach(), -labels, mask, config=Section(dpo_beta=0.1, dpo_loss_type="sigmoid")
    )
    assert swapped.item() == pytest.approx(math.log(1 + math.exp(0.08)))  # 0.733886


def test_dpo_ipo_loss_two_sequences_by_hand():
    log_prob, ref, mask, labels = _pair()
    loss, _ = compute_policy_loss_dpo(
        ref, log_prob, labels, mask, config=Section(dpo_beta=0.1, dpo_loss_type="ipo")
    )
    assert loss.item() == pytest.approx((0.8 - 1 / (2 * 0.1)) ** 2)  # (0.8 - 5)^2 = 17.64
    loss.backward()
    assert log_prob.grad.flatten().tolist() == pytest.approx([-8.4, -8.4, 8.4, 0.0])  # 2 (h - 5) = -8.4


def test_a_tied_pair_trains_nothing_but_counts_and_micro_batches_sum_to_the_batch():
    log_prob, ref, mask, labels = _pair()
    cfg = Section(dpo_beta=0.1, dpo_loss_type="sigmoid")
    tie = (torch.tensor([[-0.3, -0.4], [-0.2, -0.6]]), torch.tensor([[-0.1, -0.2], [-0.9, -0.6]]))
    lp = torch.cat([log_prob.detach(), tie[0]]).requires_grad_(True)
    rf, mk = torch.cat([ref, tie[1]]), torch.cat([mask, torch.ones(2, 2)])
    lb = torch.cat([labels, torch.zeros(2, 2)])
    loss, metrics = compute_policy_loss_dpo(rf, lp, lb, mk, config=cfg)
    assert loss.item() == pytest.approx(math.log(1 + math.exp(-0.08)) / 2)  # 2 pairs, one with a preference
    loss.backward()
    assert lp.grad[2:].abs().sum().item() == 0.0
    assert metrics["actor/dpo_accuracy"] == 1.0  # over the pairs with a preference
    info = GlobalBatchInfo.from_mask(mk)  # 4 sequences = 2 pairs over the whole batch
    parts = [
        compute_policy_loss_dpo(
            rf[i : i + 2],
            lp.detach()[i : i + 2],
            lb[i : i + 2],
            mk[i : i + 2],
            config=cfg,
            global_batch_info=info,
        )[0]
        for i in (0, 2)
    ]
    assert (parts[0] + parts[1]).item() == pytest.approx(loss.item())


def test_registered_and_refusals_name_the_problem():
    assert get_adv_estimator_fn("spin") is compute_spin_pair_labels
    assert get_policy_loss_fn("dpo") is compute_policy_loss_dpo
    log_prob, ref, mask, labels = _pair()
    with pytest.raises(ValueError, match="dpo_loss_type='hinge'"):
        compute_policy_loss_dpo(
            ref, log_prob, labels, mask, config=Section(dpo_beta=0.1, dpo_loss_type="hinge")
        )
    with pytest.raises(ValueError, match="rollout_is_weights"):
        compute_policy_loss_dpo(
            ref,
            log_prob,
            labels,
            mask,
            config=Section(dpo_beta=0.1, dpo_loss_type="ipo"),
            rollout_is_weights=torch.ones(2, 2),
        )
    from verl.trainer.config import load_config

    with pytest.raises(KeyError, match=r"actor_rollout_ref.actor.dpo_beta.*verl-spin"):
        compute_policy_loss_dpo(ref, log_prob, labels, mask, config=load_config([]).actor_rollout_ref.actor)
