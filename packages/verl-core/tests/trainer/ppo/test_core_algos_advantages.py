"""Advantage estimators against hand-worked values and slow per-sample reference loops."""

import math
import statistics
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from verl.trainer.ppo import core_algos


def outcome_batch(scores, lengths, width=None):
    """Rewards with each row's score on its last valid token, and the matching right-padded mask."""
    width = width or max(lengths)
    rewards = torch.zeros(len(scores), width, dtype=torch.float64)
    mask = torch.zeros(len(scores), width, dtype=torch.float64)
    for i, (s, n) in enumerate(zip(scores, lengths)):
        mask[i, :n] = 1
        if n:
            rewards[i, n - 1] = s
    return rewards, mask


def uids(*names):
    return np.array(list(names), dtype=object)


def per_row(adv, mask):
    """The one value a row's advantage takes on its valid tokens (checks it is constant there)."""
    out = []
    for i in range(adv.shape[0]):
        vals = adv[i][mask[i] > 0]
        assert torch.allclose(vals, vals[0].expand_as(vals)), vals
        out.append(float(vals[0]))
        assert torch.all(adv[i][mask[i] == 0] == 0)
    return out


def test_grpo_by_hand_with_singleton_and_equal_groups():
    rewards, mask = outcome_batch([1.0, 0.0, 1.0, 1.0, 1.0, 0.7], [2, 3, 1, 2, 3, 2], width=4)
    index = uids("a", "a", "b", "b", "b", "c")
    adv, ret = core_algos.compute_grpo_outcome_advantage(rewards, mask, index)
    # group a: mean 0.5, unbiased std sqrt(0.5) -> +-0.5/sqrt(0.5)
    expected = [0.5 / math.sqrt(0.5), -0.5 / math.sqrt(0.5), 0.0, 0.0, 0.0, 0.0]
    assert per_row(adv, mask) == pytest.approx(expected, rel=1e-5)
    assert torch.equal(adv, ret)
    assert torch.isfinite(adv).all()

    # Dr.GRPO: no division by std; explicit keyword and config give the same
    dr, _ = core_algos.compute_grpo_outcome_advantage(rewards, mask, index, norm_adv_by_std_in_grpo=False)
    assert per_row(dr, mask) == pytest.approx([0.5, -0.5, 0, 0, 0, 0])
    dr_cfg, _ = core_algos.compute_grpo_outcome_advantage(
        rewards, mask, index, config=SimpleNamespace(norm_adv_by_std_in_grpo=False)
    )
    assert torch.equal(dr, dr_cfg)


def test_grpo_random_against_loop():
    g = torch.Generator().manual_seed(0)
    n = 12
    scores = torch.rand(n, generator=g, dtype=torch.float64).tolist()
    lengths = torch.randint(1, 6, (n,), generator=g).tolist()
    rewards, mask = outcome_batch(scores, lengths, width=7)
    index = uids(*[f"p{i % 4}" for i in range(n)])  # interleaved groups of 3
    adv, _ = core_algos.compute_grpo_outcome_advantage(rewards, mask, index, epsilon=1e-6)
    for i in range(n):
        group = [scores[j] for j in range(n) if index[j] == index[i]]
        want = (scores[i] - statistics.mean(group)) / (statistics.stdev(group) + 1e-6)
        assert per_row(adv, mask)[i] == pytest.approx(want, rel=1e-6)


def test_grpo_needs_index_and_matching_length():
    rewards, mask = outcome_batch([1.0, 0.0], [1, 1])
    with pytest.raises(ValueError, match="index"):
        core_algos.compute_grpo_outcome_advantage(rewards, mask)
    with pytest.raises(ValueError, match="3 entries but the batch has 2 rows"):
        core_algos.compute_grpo_outcome_advantage(rewards, mask, uids("a", "a", "b"))


def test_rloo_opo_gpg_rfpp_baseline_against_loops():
    scores = [1.0, 0.0, 0.5, 2.0, -1.0, 0.3, 0.3, 0.0]
    lengths = [3, 1, 2, 4, 2, 1, 3, 2]
    index = uids("x", "x", "x", "y", "y", "z", "z", "w")
    rewards, mask = outcome_batch(scores, lengths, width=5)
    n = len(scores)
    groups = {k: [j for j in range(n) if index[j] == k] for k in set(index)}

    rloo = per_row(core_algos.compute_rloo_outcome_advantage(rewards, mask, index)[0], mask)
    opo = per_row(core_algos.compute_opo_outcome_advantage(rewards, mask, index)[0], mask)
    gpg = per_row(core_algos.compute_gpg_outcome_advantage(rewards, mask, index)[0], mask)
    nonzero = sum(1 for s in scores if s != 0)
    alpha = n / nonzero
    for i in range(n):
        members = groups[index[i]]
        if len(members) == 1:
            assert rloo[i] == opo[i] == gpg[i] == 0.0
            continue
        others = [scores[j] for j in members if j != i]
        assert rloo[i] == pytest.approx(scores[i] - sum(others) / len(others))
        wbase = sum(lengths[j] * scores[j] for j in members) / sum(lengths[j] for j in members)
        assert opo[i] == pytest.approx(scores[i] - wbase)
        assert gpg[i] == pytest.approx(alpha * (scores[i] - statistics.mean(scores[j] for j in members)))

    # REINFORCE++ baseline: centre by group mean, then whiten over all valid tokens of the batch
    adv, ret = core_algos.compute_reinforce_plus_plus_baseline_outcome_advantage(rewards, mask, index)
    centred = []
    for i in range(n):
        members = groups[index[i]]
        c = 0.0 if len(members) == 1 else scores[i] - statistics.mean(scores[j] for j in members)
        centred += [c] * lengths[i]
    mu, sd = statistics.mean(centred), statistics.stdev(centred)
    flat = [v for i in range(n) for v in adv[i, : lengths[i]].tolist()]
    assert flat == pytest.approx([(c - mu) / math.sqrt(sd**2 + 1e-8) for c in centred], rel=1e-6)
    assert torch.all(adv[mask == 0] == 0)


def test_all_equal_rewards_give_zero_everywhere():
    rewards, mask = outcome_batch([1.0, 1.0, 1.0, 0.0, 0.0], [2, 3, 1, 2, 2], width=3)
    index = uids("a", "a", "a", "b", "b")
    for name in ("grpo", "rloo", "opo", "gpg", "grpo_passk"):
        adv, _ = core_algos.get_adv_estimator_fn(name)(
            token_level_rewards=rewards, response_mask=mask, index=index
        )
        assert torch.all(adv == 0), name


def test_grpo_passk_by_hand():
    rewards, mask = outcome_batch([0.2, 0.9, 0.5, 1.0, 1.0, 0.4], [1, 2, 2, 1, 1, 3], width=3)
    index = uids("a", "a", "a", "b", "b", "c")
    adv, _ = core_algos.compute_grpo_passk_outcome_advantage(rewards, mask, index)
    std_a = statistics.stdev([0.2, 0.9, 0.5])
    # a: only row 1 (the best) gets (0.9 - 0.5) / std; b: a tie -> gap 0; c: singleton -> 0
    assert per_row(adv, mask) == pytest.approx([0, 0.4 / (std_a + 1e-6), 0, 0, 0, 0], abs=1e-9)
    raw, _ = core_algos.compute_grpo_passk_outcome_advantage(
        rewards, mask, index, norm_adv_by_std_in_grpo=False
    )
    assert per_row(raw, mask) == pytest.approx([0, 0.4, 0, 0, 0, 0], abs=1e-12)


def test_reinforce_plus_plus_discounted_returns_against_loop():
    rewards = torch.tensor(
        [[0.5, 0.0, 1.0, 0.0], [0.0, 2.0, 9.0, 9.0], [1.0, 1.0, 1.0, 1.0]], dtype=torch.float64
    )
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1]], dtype=torch.float64)
    gamma = 0.9
    adv, ret = core_algos.compute_reinforce_plus_plus_outcome_advantage(
        rewards, mask, config=SimpleNamespace(gamma=gamma)
    )
    want = torch.zeros_like(rewards)
    for i in range(3):
        n = int(mask[i].sum())
        for t in range(n):
            want[i, t] = sum(gamma ** (k - t) * rewards[i, k].item() for k in range(t, n))
    assert torch.allclose(ret, want)
    vals = [want[i, t].item() for i in range(3) for t in range(4) if mask[i, t]]
    mu, sd = statistics.mean(vals), statistics.stdev(vals)
    for i in range(3):
        for t in range(4):
            exp = (want[i, t].item() - mu) / math.sqrt(sd**2 + 1e-8) if mask[i, t] else 0.0
            assert adv[i, t].item() == pytest.approx(exp, rel=1e-6, abs=1e-9)


def test_remax_by_hand():
    rewards = torch.tensor([[0.0, 1.0, 0.0], [0.5, 0.0, 2.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    baselines = torch.tensor([0.25, 1.0])
    adv, ret = core_algos.compute_remax_outcome_advantage(rewards, baselines, mask)
    assert torch.allclose(ret, torch.tensor([[1.0, 1.0, 0.0], [2.5, 2.0, 2.0]]))
    assert torch.allclose(adv, torch.tensor([[0.75, 0.75, 0.0], [1.5, 1.0, 1.0]]))
    with pytest.raises(ValueError, match="reward_baselines"):
        core_algos.get_adv_estimator_fn("remax")(token_level_rewards=rewards, response_mask=mask)


def _gae_reference(rewards, values, mask, gamma, lam):
    """Plain GAE on each row's valid tokens only (masked positions removed), V after the end = 0."""
    adv = torch.zeros_like(rewards)
    for i in range(rewards.shape[0]):
        pos = [t for t in range(rewards.shape[1]) if mask[i, t]]
        last = 0.0
        for k in reversed(range(len(pos))):
            t = pos[k]
            v_next = values[i, pos[k + 1]].item() if k + 1 < len(pos) else 0.0
            delta = rewards[i, t].item() + gamma * v_next - values[i, t].item()
            last = delta + gamma * lam * last
            adv[i, t] = last
    return adv


def test_gae_against_loop_with_padding_and_holes():
    g = torch.Generator().manual_seed(1)
    rewards = torch.randn(4, 6, generator=g, dtype=torch.float64)
    values = torch.randn(4, 6, generator=g, dtype=torch.float64)
    mask = torch.tensor(
        [
            [1, 1, 1, 1, 1, 1],
            [1, 1, 1, 0, 0, 0],
            [1, 1, 0, 0, 1, 1],
            [1, 0, 0, 0, 0, 0],
        ],  # row 2: a tool-output hole
        dtype=torch.float64,
    )
    gamma, lam = 0.95, 0.8
    adv, ret = core_algos.compute_gae_advantage_return(rewards, values, mask, gamma, lam)
    raw = _gae_reference(rewards, values, mask, gamma, lam)
    assert torch.allclose(ret, (raw + values) * mask)
    vals = raw[mask > 0]
    whitened = (raw - vals.mean()) / torch.sqrt(vals.var(unbiased=True) + 1e-8) * mask
    assert torch.allclose(adv, whitened)
    # the same through the uniform keyword call with gamma/lam from config
    adv2, ret2 = core_algos.get_adv_estimator_fn(core_algos.AdvantageEstimator.GAE)(
        token_level_rewards=rewards,
        response_mask=mask,
        values=values,
        index=uids("a", "b", "c", "d"),
        config=SimpleNamespace(gamma=gamma, lam=lam, norm_adv_by_std_in_grpo=True),
        reward_baselines=None,
    )
    assert torch.equal(adv, adv2) and torch.equal(ret, ret2)


def test_gae_gamma_lam_one_is_reward_to_go_minus_value():
    rewards = torch.tensor([[0.0, 0.0, 1.0]], dtype=torch.float64)
    values = torch.tensor([[0.2, 0.5, 0.7]], dtype=torch.float64)
    mask = torch.ones(1, 3, dtype=torch.float64)
    _, ret = core_algos.compute_gae_advantage_return(rewards, values, mask, gamma=1.0, lam=1.0)
    assert torch.allclose(ret, torch.tensor([[1.0, 1.0, 1.0]], dtype=torch.float64))


def test_every_registered_estimator_takes_the_uniform_call():
    rewards, mask = outcome_batch([1.0, 0.0, 0.5, 0.5, 3.0], [2, 4, 1, 3, 2], width=4)
    cfg = SimpleNamespace(gamma=1.0, lam=0.95, norm_adv_by_std_in_grpo=True)
    for name in core_algos.AdvantageEstimator:
        fn = core_algos.get_adv_estimator_fn(name.value)
        adv, ret = fn(
            token_level_rewards=rewards,
            response_mask=mask,
            index=uids("a", "a", "b", "b", "c"),
            config=cfg,
            values=torch.full_like(rewards, 0.1),
            reward_baselines=torch.zeros(5, dtype=torch.float64),
        )
        assert adv.shape == ret.shape == rewards.shape, name
        assert torch.isfinite(adv).all() and torch.isfinite(ret).all(), name
        assert torch.all(adv[mask == 0] == 0), name


def test_registry_errors_and_custom_estimator():
    with pytest.raises(ValueError, match="has already been registered"):
        core_algos.register_adv_est("grpo")(lambda **kw: None)
    with pytest.raises(KeyError, match="known: .*grpo.*rloo"):
        core_algos.get_adv_estimator_fn("grpoo")

    @core_algos.register_adv_est("test_constant_one")
    def constant(token_level_rewards, response_mask, **kwargs):
        return response_mask.clone(), response_mask.clone()

    try:
        assert core_algos.get_adv_estimator_fn("test_constant_one") is constant
    finally:
        core_algos.ADV_ESTIMATOR_REGISTRY.unregister("test_constant_one")
    assert core_algos.AdvantageEstimator("grpo") == "grpo"


def test_estimators_read_a_read_only_omegaconf_algorithm_node():
    from omegaconf import OmegaConf

    algo = OmegaConf.create({"gamma": 0.5, "lam": 1.0, "norm_adv_by_std_in_grpo": False})
    OmegaConf.set_readonly(algo, True)
    rewards, mask = outcome_batch([1.0, 0.0], [2, 2])
    adv, _ = core_algos.get_adv_estimator_fn("grpo")(
        token_level_rewards=rewards, response_mask=mask, index=uids("a", "a"), config=algo
    )
    assert per_row(adv, mask) == pytest.approx([0.5, -0.5])
    _, ret = core_algos.get_adv_estimator_fn("reinforce_plus_plus")(
        token_level_rewards=rewards, response_mask=mask, config=algo
    )
    assert ret[0].tolist() == pytest.approx([0.5, 1.0])  # gamma 0.5 from the config
