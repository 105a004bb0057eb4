"""Upstream verl's spellings of the core_algos API, against hand-worked values.

agg_loss / compute_value_loss with dp_size, batch_num_tokens, global_batch_size, loss_scale_factor;
the vectorised GRPO/RLOO names; the registries as dicts; the DRO loss; the REINFORCE++ return across
masked observation spans (regression) and GAE across the same spans.
"""

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from verl.trainer.ppo import core_algos
from verl.trainer.ppo.core_algos import GlobalBatchInfo, agg_loss
from verl.utils.registry import UnknownNameError

LOSS = torch.tensor([[1.0, 2.0, 3.0, 100.0], [4.0, 100.0, 100.0, 100.0], [100.0] * 4], dtype=torch.float64)
MASK = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0]], dtype=torch.float64)
# this rank: valid-token sum 10 over 4 tokens; sequence sums 6 and 4; sequence means 2 and 4


@pytest.mark.parametrize(
    "mode, kwargs, want",
    [
        # masked_sum / batch_num_tokens * dp_size
        ("token-mean", dict(dp_size=2, batch_num_tokens=8), 10 / 8 * 2),
        ("token-mean", dict(batch_num_tokens=5), 10 / 5),
        ("token-mean", {}, 10 / 4),
        # masked_sum * dp_size
        ("token-sum", dict(dp_size=2), 20.0),
        ("token-sum", dict(dp_size=3, batch_num_tokens=99, global_batch_size=99), 30.0),
        # sum of sequence sums / global_batch_size * dp_size
        ("seq-mean-token-sum", dict(dp_size=2, global_batch_size=4), (6 + 4) / 4 * 2),
        ("seq-mean-token-sum", {}, (6 + 4) / 2),
        ("seq-mean-token-mean", dict(dp_size=2, global_batch_size=4), (2 + 4) / 4 * 2),
        ("seq-mean-token-mean", dict(global_batch_size=3), (2 + 4) / 3),
        # ... then / loss_scale_factor (default: the padded length 4)
        ("seq-mean-token-sum-norm", dict(dp_size=2, global_batch_size=4, loss_scale_factor=2), 10 / 4 * 2 / 2),
        ("seq-mean-token-sum-norm", dict(dp_size=2, global_batch_size=4), 10 / 4 * 2 / 4),
    ],
)
def test_agg_loss_upstream_spelling_by_hand(mode, kwargs, want):
    assert agg_loss(LOSS, MASK, mode, **kwargs).item() == pytest.approx(want, rel=1e-12)


def test_agg_loss_upstream_positional_order_and_tensor_counts():
    # upstream order: loss_mat, loss_mask, loss_agg_mode, dp_size, batch_num_tokens, global_batch_size, scale
    assert agg_loss(LOSS, MASK, "seq-mean-token-sum-norm", 2, None, 4, 5).item() == pytest.approx(10 / 4 * 2 / 5)
    # counts may be tensors (upstream passes loss_mask.sum() along)
    got = agg_loss(LOSS, MASK, "token-mean", 2, torch.tensor(8.0, dtype=torch.float64))
    assert got.item() == pytest.approx(2.5)


@pytest.mark.parametrize("mode", core_algos.LOSS_AGG_MODES)
def test_both_spellings_are_one_computation(mode):
    g = torch.Generator().manual_seed(3)
    loss = torch.randn(5, 7, generator=g, dtype=torch.float64)
    mask = (torch.rand(5, 7, generator=g) > 0.4).double()
    info = GlobalBatchInfo(global_token_count=31.0, global_seq_count=9.0, loss_scale_factor=6.0)
    ours = agg_loss(loss, mask, mode, global_batch_info=info)
    theirs = agg_loss(loss, mask, mode, dp_size=4, batch_num_tokens=31, global_batch_size=9, loss_scale_factor=6)
    assert theirs.item() == pytest.approx(4 * ours.item(), rel=1e-12)


@pytest.mark.parametrize("mode", core_algos.LOSS_AGG_MODES)
def test_upstream_spelling_over_ranks_averages_to_the_full_batch(mode):
    """What FSDP does with the upstream spelling: each rank sums its micro-batch losses (x dp_size), the
    gradient all-reduce averages over ranks; that average is the loss of the whole batch."""
    g = torch.Generator().manual_seed(5)
    loss = torch.randn(8, 5, generator=g, dtype=torch.float64)
    lengths = [5, 2, 0, 4, 1, 3, 5, 2]
    mask = torch.tensor([[1.0] * n + [0.0] * (5 - n) for n in lengths], dtype=torch.float64)
    full = agg_loss(loss, mask, mode)
    ranks = [[slice(0, 3), slice(3, 4)], [slice(4, 6), slice(6, 8)]]
    n_tokens, n_seqs = sum(lengths), sum(1 for n in lengths if n)
    per_rank = [
        sum(agg_loss(loss[s], mask[s], mode, dp_size=2, batch_num_tokens=n_tokens, global_batch_size=n_seqs)
            for s in mbs)
        for mbs in ranks
    ]
    assert (sum(per_rank) / 2).item() == pytest.approx(full.item(), rel=1e-12)


def test_agg_loss_upstream_errors():
    with pytest.raises(ValueError, match="dp_size=2 needs batch_num_tokens"):
        agg_loss(LOSS, MASK, "token-mean", dp_size=2)
    for mode in ("seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"):
        with pytest.raises(ValueError, match="needs global_batch_size"):
            agg_loss(LOSS, MASK, mode, dp_size=2, batch_num_tokens=8)
    with pytest.raises(ValueError, match="not both"):
        agg_loss(LOSS, MASK, "token-mean", dp_size=2, global_batch_info=GlobalBatchInfo(4, 2))
    # the pre-upstream positional call must not be taken for a dp_size
    with pytest.raises(TypeError, match="global_batch_info="):
        agg_loss(LOSS, MASK, "token-mean", GlobalBatchInfo(4, 2))
    with pytest.raises(ValueError, match="unknown loss_agg_mode"):
        agg_loss(LOSS, MASK, "mean", dp_size=2)


def test_compute_value_loss_upstream_spelling_by_hand():
    vpreds = torch.tensor([[1.0, 2.0, 9.0]], dtype=torch.float64)
    values = torch.tensor([[0.5, 2.0, 9.0]], dtype=torch.float64)
    returns = torch.tensor([[1.0, 0.0, 9.0]], dtype=torch.float64)
    mask = torch.tensor([[1.0, 1.0, 0.0]], dtype=torch.float64)
    # token 0: clip(1.0, 0.3, 0.7) = 0.7 -> max(0, 0.09) = 0.09 (the clipped error wins); token 1: 4
    loss, clipfrac = core_algos.compute_value_loss(
        vpreds, returns, values, mask, 0.2, "token-mean", 2, 4, None, None
    )
    assert loss.item() == pytest.approx(0.5 * (0.09 + 4.0) / 4 * 2)
    assert clipfrac.item() == pytest.approx(0.5)
    ours, _ = core_algos.compute_value_loss(
        vpreds, returns, values, mask, 0.2, global_batch_info=GlobalBatchInfo(4, 1)
    )
    assert ours.item() == pytest.approx(0.5 * (0.09 + 4.0) / 4)
    local, _ = core_algos.compute_value_loss(vpreds, returns, values, mask, cliprange_value=0.2)
    assert local.item() == pytest.approx(0.5 * (0.09 + 4.0) / 2)
    seq, _ = core_algos.compute_value_loss(
        vpreds, returns, values, mask, 0.2, loss_agg_mode="seq-mean-token-sum-norm", dp_size=2,
        global_batch_size=2, loss_scale_factor=8,
    )
    assert seq.item() == pytest.approx(0.5 * 4.09 / 2 * 2 / 8)


# ------------------------------------------------------------------ vectorised estimators


def _outcome(scores, lengths, width):
    rewards = torch.zeros(len(scores), width, dtype=torch.float64)
    mask = torch.zeros(len(scores), width, dtype=torch.float64)
    for i, (s, n) in enumerate(zip(scores, lengths)):
        mask[i, :n] = 1
        rewards[i, n - 1] = s
    return rewards, mask


def test_grpo_and_rloo_vectorized_by_hand_and_equal_to_the_registered_ones():
    rewards, mask = _outcome([1.0, 0.0, 0.5, 2.0, 2.0, 7.0], [2, 3, 1, 2, 2, 3], width=3)
    index = np.array(["x", "x", "x", "y", "y", "z"], dtype=object)
    adv, ret = core_algos.get_adv_estimator_fn("grpo_vectorized")(
        token_level_rewards=rewards, response_mask=mask, index=index, config=SimpleNamespace(norm_adv_by_std_in_grpo=True)
    )
    # group x = [1, 0, 0.5]: mean 0.5, unbiased std 0.5 -> (+-0.5, 0) / (0.5 + 1e-6); y all equal -> 0;
    # z is a group of one -> 0 (our rule for both spellings)
    s = 0.5 / (0.5 + 1e-6)
    want = torch.tensor([s, -s, 0.0, 0.0, 0.0, 0.0], dtype=torch.float64).unsqueeze(-1) * mask
    assert torch.allclose(adv, want) and torch.equal(adv, ret)
    loop, _ = core_algos.compute_grpo_outcome_advantage(rewards, mask, index)
    assert torch.equal(adv, loop)
    dr, _ = core_algos.compute_grpo_vectorized_outcome_advantage(rewards, mask, index, norm_adv_by_std_in_grpo=False)
    assert torch.allclose(dr, torch.tensor([0.5, -0.5, 0, 0, 0, 0], dtype=torch.float64).unsqueeze(-1) * mask)

    adv, ret = core_algos.get_adv_estimator_fn(core_algos.AdvantageEstimator.RLOO_VECTORIZED)(
        token_level_rewards=rewards, response_mask=mask, index=index
    )
    # leave-one-out: 1 - mean(0, .5) = .75; 0 - mean(1, .5) = -.75; .5 - mean(1, 0) = 0
    want = torch.tensor([0.75, -0.75, 0.0, 0.0, 0.0, 0.0], dtype=torch.float64).unsqueeze(-1) * mask
    assert torch.allclose(adv, want) and torch.equal(adv, ret)
    assert torch.equal(adv, core_algos.compute_rloo_outcome_advantage(rewards, mask, index)[0])


# ------------------------------------------------------------------ registries as upstream's dicts


def test_registries_behave_like_upstream_dicts():
    reg = core_algos.ADV_ESTIMATOR_REGISTRY
    assert reg["gae"] is core_algos.compute_gae_advantage_return
    assert "grpo_vectorized" in reg and "rloo_vectorized" in reg and "nope" not in reg
    assert len(reg) == len(list(reg)) == len(dict(reg)) >= 11
    assert dict(reg.items())["rloo_vectorized"] is core_algos.compute_rloo_vectorized_outcome_advantage
    assert core_algos.POLICY_LOSS_REGISTRY["dro"] is core_algos.compute_policy_loss_dro
    assert reg.get("nope", None) is None
    for getter in (core_algos.get_adv_estimator_fn, core_algos.get_policy_loss_fn):
        with pytest.raises(ValueError, match="known: |Supported modes are: "):  # upstream raises ValueError
            getter("nope")
    with pytest.raises(KeyError) as e:
        reg["nope"]
    assert isinstance(e.value, UnknownNameError)
    with pytest.raises(ValueError, match="already registered"):
        reg["grpo"] = lambda **kw: None


def test_registry_clear_and_restore_as_upstream_tests_do():
    reg = core_algos.POLICY_LOSS_REGISTRY
    saved = reg.copy()
    assert isinstance(saved, dict) and "vanilla" in saved
    try:
        reg.clear()
        assert len(reg) == 0 and list(reg) == [] and "vanilla" not in reg
        with pytest.raises(ValueError, match=r"Unsupported loss mode: vanilla. Supported modes are: \[\]"):
            core_algos.get_policy_loss_fn("vanilla")

        @core_algos.register_policy_loss("vanilla")
        def mine(*args, **kwargs):
            return None

        assert dict(reg) == {"vanilla": mine}
    finally:
        reg.clear()
        reg.update(saved)
    assert reg["vanilla"] is core_algos.compute_policy_loss_vanilla and len(reg) == len(saved)


# ------------------------------------------------------------------ DRO


def test_dro_loss_value_gradient_and_metrics_by_hand():
    log_prob = torch.tensor([[-1.0, -2.0, -3.0]], dtype=torch.float64, requires_grad=True)
    old = torch.tensor([[-1.5, -2.0, -9.0]], dtype=torch.float64)
    adv = torch.tensor([[2.0, -1.0, 5.0]], dtype=torch.float64)
    mask = torch.tensor([[1.0, 1.0, 0.0]], dtype=torch.float64)
    cfg = core_algos.PolicyLossConfig(loss_mode="dro", dro_beta=0.5)
    loss, metrics = core_algos.get_policy_loss_fn("dro")(old, log_prob, adv, mask, "token-mean", cfg)
    # token 0: -(2 * -1 - 0.25 * 0.5^2) = 2.0625; token 1: -(-1 * -2 - 0) = -2; mean over 2 tokens
    assert loss.item() == pytest.approx((2.0625 - 2.0) / 2)
    loss.backward()
    # d/dlogp = -(A - beta * (logp - old)) / 2 tokens
    assert log_prob.grad[0].tolist() == pytest.approx([-(2.0 - 0.5 * 0.5) / 2, 1.0 / 2, 0.0])
    assert metrics["actor/ppo_kl"] == pytest.approx((0.5 + 0.0) / 2 * -1)
    weighted, _ = core_algos.compute_policy_loss_dro(
        old, log_prob.detach(), adv, mask, "token-sum", cfg, rollout_is_weights=torch.tensor([[2.0, 0.5, 1.0]])
    )
    assert weighted.item() == pytest.approx(2 * 2.0625 + 0.5 * -2.0)
    for beta in (None, 0.0):
        with pytest.raises(ValueError, match="dro_beta > 0"):
            core_algos.compute_policy_loss_dro(old, log_prob, adv, mask, config=core_algos.PolicyLossConfig(dro_beta=beta))


# ------------------------------------------------------------------ returns across masked spans


def test_reinforce_plus_plus_return_carries_across_a_masked_observation_span():
    """Regression: a tool-output span (mask 0) inside a multi-turn response must not cut the return."""
    rewards = torch.tensor([[0.0, 0.0, 0.0, 0.0, 2.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0, 0.0, 1.0]])
    adv, ret = core_algos.compute_reinforce_plus_plus_outcome_advantage(rewards, mask, gamma=0.5)
    # G_4 = 2; the masked tokens 2, 3 pass it through; G_1 = 0.5 * 2 = 1; G_0 = 0.5 * 1 = 0.5
    assert ret[0].tolist() == pytest.approx([0.5, 1.0, 0.0, 0.0, 2.0])
    # whitened over the 3 valid returns {0.5, 1, 2}: mean 7/6, unbiased var 7/12
    mu, var = 7 / 6, 7 / 12
    want = [(x - mu) / (var + 1e-8) ** 0.5 if m else 0.0 for x, m in zip([0.5, 1, 0, 0, 2], [1, 1, 0, 0, 1])]
    assert adv[0].tolist() == pytest.approx(want, rel=1e-5)
    # a reward placed on a masked token is ignored (it belongs to no generated token)
    _, ret2 = core_algos.compute_reinforce_plus_plus_outcome_advantage(
        torch.tensor([[0.0, 0.0, 5.0, 0.0, 2.0]]), mask, gamma=0.5
    )
    assert torch.equal(ret, ret2)


def test_gae_carries_value_and_advantage_across_a_masked_observation_span():
    rewards = torch.tensor([[0.0, 0.0, 0.0, 0.0, 2.0]], dtype=torch.float64)
    values = torch.tensor([[0.5, 1.0, 7.0, 7.0, 1.5]], dtype=torch.float64)
    mask = torch.tensor([[1.0, 1.0, 0.0, 0.0, 1.0]], dtype=torch.float64)
    _, ret = core_algos.compute_gae_advantage_return(rewards, values, mask, gamma=0.5, lam=1.0)
    # valid tokens 0, 1, 4 as one chain: A4 = 2 - 1.5 = 0.5; A1 = 0 + 0.5 * 1.5 - 1 + 0.5 * 0.5 = 0;
    # A0 = 0 + 0.5 * 1 - 0.5 + 0.5 * 0 = 0; returns = A + V
    assert ret[0].tolist() == pytest.approx([0.5, 1.0, 0.0, 0.0, 2.0])
