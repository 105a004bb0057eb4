"""Policy losses against hand-worked values and gradients at chosen ratios."""

import math
from types import SimpleNamespace

import pytest
import torch
from verl.trainer.ppo import core_algos
from verl.trainer.ppo.core_algos import GlobalBatchInfo, PolicyLossConfig


def logp_for(ratios, old=None):
    """log_prob (a leaf with grad) such that exp(log_prob - old) == ratios."""
    ratios = torch.tensor(ratios, dtype=torch.float64)
    old = torch.zeros_like(ratios) if old is None else old
    return old, (old + ratios.log()).requires_grad_(True)


def test_vanilla_dual_clip_by_hand():
    # tokens: (A, r) = (+1, 1.5) clipped high, (+1, 0.5) unclipped, (-1, 1.5) unclipped,
    # (-1, 5) dual-clipped at clip_ratio_c=3, (-1, 0.5) clipped low, then one padded token
    adv = torch.tensor([[1.0, 1.0, -1.0, -1.0, -1.0, 5.0]], dtype=torch.float64)
    old, logp = logp_for([[1.5, 0.5, 1.5, 5.0, 0.5, 100.0]])
    mask = torch.tensor([[1, 1, 1, 1, 1, 0]], dtype=torch.float64)
    loss, m = core_algos.compute_policy_loss_vanilla(old, logp, adv, mask, "token-mean", PolicyLossConfig())
    assert loss.item() == pytest.approx((-1.2 - 0.5 + 1.5 + 3.0 + 0.8) / 5)
    assert m["actor/pg_clipfrac"] == pytest.approx(2 / 5)
    assert m["actor/pg_clipfrac_lower"] == pytest.approx(1 / 5)
    kl = -(math.log(1.5) + math.log(0.5) + math.log(1.5) + math.log(5) + math.log(0.5)) / 5
    assert m["actor/ppo_kl"] == pytest.approx(kl)
    loss.backward()
    # d(-A r)/dlogp = -A r on unclipped tokens, 0 on clipped ones and padding
    assert torch.allclose(logp.grad, torch.tensor([[0.0, -0.5, 1.5, 0.0, 0.0, 0.0]], dtype=torch.float64) / 5)


def test_vanilla_decoupled_clip_and_config_objects():
    adv = torch.tensor([[1.0, -1.0]], dtype=torch.float64)
    old, logp = logp_for([[1.25, 0.85]])
    mask = torch.ones(1, 2, dtype=torch.float64)
    cfg = PolicyLossConfig(clip_ratio=0.2, clip_ratio_low=0.1, clip_ratio_high=0.3)
    loss, m = core_algos.compute_policy_loss_vanilla(old, logp, adv, mask, config=cfg)
    # 1.25 < 1 + 0.3 stays; 0.85 < 1 - 0.1 is clipped to 0.9 for the negative advantage
    assert loss.item() == pytest.approx((-1.25 + 0.9) / 2)
    assert m["actor/pg_clipfrac"] == pytest.approx(0.5)
    # an actor-shaped config (None low/high fall back to clip_ratio) works by attribute
    actor = SimpleNamespace(clip_ratio=0.2, clip_ratio_low=None, clip_ratio_high=None, clip_ratio_c=3.0)
    loss2, _ = core_algos.get_policy_loss_fn("vanilla")(old, logp, adv, mask, config=actor)
    assert loss2.item() == pytest.approx((-1.2 + 0.85) / 2)
    with pytest.raises(ValueError, match="clip_ratio_c must be > 1"):
        core_algos.compute_policy_loss_vanilla(
            old, logp, adv, mask, config=PolicyLossConfig(clip_ratio_c=1.0)
        )


def test_rollout_is_weights_scale_each_token():
    adv = torch.tensor([[1.0, -2.0, 0.5]], dtype=torch.float64)
    old, logp = logp_for([[1.0, 1.1, 0.95]])
    mask = torch.ones(1, 3, dtype=torch.float64)
    w = torch.tensor([[2.0, 0.5, 1.0]], dtype=torch.float64)
    loss, _ = core_algos.compute_policy_loss_vanilla(old, logp, adv, mask, rollout_is_weights=w)
    want = (2.0 * -1.0 + 0.5 * (2.0 * 1.1) + 1.0 * (-0.5 * 0.95)) / 3
    assert loss.item() == pytest.approx(want)


def test_gspo_sequence_ratio_and_token_gradient():
    old = torch.zeros(2, 4, dtype=torch.float64)
    logp = torch.tensor(
        [[0.1, -0.3, 0.5, 7.0], [1.0, 1.0, 3.0, 3.0]], dtype=torch.float64, requires_grad=True
    )
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]], dtype=torch.float64)
    adv = torch.tensor([[2.0] * 4, [1.0] * 4], dtype=torch.float64)
    loss, m = core_algos.compute_policy_loss_gspo(old, logp, adv, mask, "token-mean", PolicyLossConfig())
    s0 = math.exp(0.1)  # exp(mean(0.1, -0.3, 0.5)), inside [0.8, 1.2]
    # row 1: s = e^1 > 1.2 and A > 0 -> clipped to 1.2, no gradient
    assert loss.item() == pytest.approx((-2 * s0 + -1.2) / 2)
    assert m["actor/pg_clipfrac"] == pytest.approx(2 / 5)
    loss.backward()
    want = torch.tensor([[-2 * s0 / 3 / 2] * 3 + [0.0], [0.0] * 4], dtype=torch.float64)
    assert torch.allclose(logp.grad, want)


def test_gpg_and_cispo_values_and_gradients():
    adv = torch.tensor([[1.0, 1.0, -2.0, 4.0]], dtype=torch.float64)
    old, logp = logp_for([[1.5, 0.5, 1.0, 3.0]])
    mask = torch.tensor([[1, 1, 1, 0]], dtype=torch.float64)
    loss, _ = core_algos.compute_policy_loss_gpg(old, logp, adv, mask)
    assert loss.item() == pytest.approx(-(math.log(1.5) + math.log(0.5)) / 3)
    loss.backward()
    assert torch.allclose(logp.grad, torch.tensor([[-1.0, -1.0, 2.0, 0.0]], dtype=torch.float64) / 3)

    old, logp = logp_for([[1.5, 0.5, 1.0, 3.0]])
    loss, m = core_algos.compute_policy_loss_cispo(old, logp, adv, mask)
    # weights clip(r, 0.8, 1.2) = 1.2, 0.8, 1.0 and are constants: clipped tokens keep their gradient
    assert loss.item() == pytest.approx((-1.2 * math.log(1.5) - 0.8 * math.log(0.5) + 0.0) / 3)
    loss.backward()
    assert torch.allclose(logp.grad, torch.tensor([[-1.2, -0.8, 2.0, 0.0]], dtype=torch.float64) / 3)
    assert m["actor/pg_clipfrac"] == pytest.approx(1 / 3) and m["actor/pg_clipfrac_lower"] == pytest.approx(
        1 / 3
    )


def test_geo_mean_by_hand():
    old = torch.zeros(2, 3, dtype=torch.float64)
    logp = torch.tensor([[0.1, 0.6, -0.5], [0.6, -0.5, 9.0]], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]], dtype=torch.float64)
    adv = torch.tensor([[1.0] * 3, [-1.0] * 3], dtype=torch.float64)
    cfg = PolicyLossConfig(clip_ratio=0.4, clip_ratio_low=0.4, clip_ratio_high=0.4)
    loss, m = core_algos.compute_policy_loss_geo_mean(old, logp, adv, mask, config=cfg)
    # row 0 (A>0): log ratios capped from above at 0.4 -> mean(0.1, 0.4, -0.5) = 0 -> loss -1
    # row 1 (A<0): capped from below at -0.4 -> mean(0.6, -0.4) = 0.1 -> loss +e^0.1
    assert loss.item() == pytest.approx((-1 + math.exp(0.1)) / 2)
    assert m["actor/pg_clipfrac"] == pytest.approx(2 / 5) and m["actor/pg_clipfrac_lower"] == pytest.approx(
        2 / 5
    )


def test_clip_cov_drops_the_selected_token():
    g = torch.Generator().manual_seed(3)
    adv = torch.randn(3, 5, generator=g, dtype=torch.float64)
    old = torch.randn(3, 5, generator=g, dtype=torch.float64)
    logp = (old + 0.01 * torch.randn(3, 5, generator=g, dtype=torch.float64)).requires_grad_(
        True
    )  # no PPO clip
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 1, 1, 1, 0]], dtype=torch.float64)
    valid = mask > 0
    lp = logp.detach()
    cov = (adv - adv[valid].mean()) * (lp - lp[valid].mean())
    # bounds that contain exactly the valid token with the largest covariance
    order = cov[valid].sort(descending=True).values
    lb, ub = (order[0] + order[1]).item() / 2, order[0].item() + 1
    target = (cov == order[0]) & valid
    cfg = PolicyLossConfig(clip_cov_ratio=1.0, clip_cov_lb=lb, clip_cov_ub=ub)
    loss, m = core_algos.compute_policy_loss_clip_cov(old, logp, adv, mask, config=cfg)
    ratio = torch.exp(lp - old)
    want = ((-adv * ratio) * mask * (~target)).sum() / mask.sum()
    assert loss.item() == pytest.approx(want.item())
    assert m["actor/pg_clipfrac"] == pytest.approx(1 / 12)


def test_kl_cov_penalises_top_covariance_tokens():
    g = torch.Generator().manual_seed(4)
    adv = torch.randn(2, 6, generator=g, dtype=torch.float64)
    old = torch.randn(2, 6, generator=g, dtype=torch.float64)
    logp = old + 0.3 * torch.randn(2, 6, generator=g, dtype=torch.float64)
    mask = torch.tensor([[1] * 6, [1, 1, 1, 1, 0, 0]], dtype=torch.float64)
    cfg = PolicyLossConfig(kl_cov_ratio=0.2, ppo_kl_coef=0.5)  # int(0.2 * 10 valid) = 2 tokens
    loss, m = core_algos.compute_policy_loss_kl_cov(old, logp, adv, mask, config=cfg)
    valid = mask > 0
    cov = (adv - adv[valid].mean()) * (logp - logp[valid].mean())
    cov = torch.where(valid, cov, torch.tensor(-math.inf, dtype=torch.float64))
    top2 = cov.reshape(-1).topk(2).indices
    pen = torch.zeros(12, dtype=torch.float64)
    pen[top2] = 1
    pen = pen.reshape(2, 6)
    token = -adv * torch.exp(logp - old) + pen * 0.5 * (logp - old).abs()
    assert loss.item() == pytest.approx(((token * mask).sum() / mask.sum()).item())
    assert m["actor/pg_clipfrac"] == pytest.approx(2 / 10)


@pytest.mark.parametrize("name", ["vanilla", "gspo", "gpg", "geo_mean", "cispo"])
def test_micro_batch_losses_sum_to_the_full_batch(name):
    g = torch.Generator().manual_seed(5)
    old = torch.randn(6, 5, generator=g, dtype=torch.float64)
    logp = old + 0.3 * torch.randn(6, 5, generator=g, dtype=torch.float64)
    adv = torch.randn(6, 5, generator=g, dtype=torch.float64)
    lengths = [5, 1, 3, 0, 4, 2]
    mask = torch.tensor([[1.0] * n + [0.0] * (5 - n) for n in lengths], dtype=torch.float64)
    fn = core_algos.get_policy_loss_fn(name)
    for mode in core_algos.LOSS_AGG_MODES:
        full, _ = fn(old, logp, adv, mask, mode)
        info = GlobalBatchInfo.from_mask(mask)
        parts = [slice(0, 1), slice(1, 4), slice(4, 6)]
        summed = sum(fn(old[s], logp[s], adv[s], mask[s], mode, global_batch_info=info)[0] for s in parts)
        assert summed.item() == pytest.approx(full.item(), rel=1e-10, abs=1e-12), mode


def test_every_registered_loss_has_the_one_signature():
    g = torch.Generator().manual_seed(6)
    old = torch.randn(4, 5, generator=g)
    adv = torch.randn(4, 5, generator=g)
    mask = (torch.rand(4, 5, generator=g) > 0.3).float()
    for name in ("vanilla", "gspo", "gpg", "clip_cov", "kl_cov", "geo_mean", "cispo"):
        logp = (old + 0.2 * torch.randn(4, 5, generator=g)).requires_grad_(True)
        loss, metrics = core_algos.get_policy_loss_fn(name)(
            old_log_prob=old,
            log_prob=logp,
            advantages=adv,
            response_mask=mask,
            loss_agg_mode="token-mean",
            config=PolicyLossConfig(),
            rollout_is_weights=torch.ones_like(adv),
        )
        loss.backward()
        assert loss.dim() == 0 and torch.isfinite(loss), name
        assert torch.isfinite(logp.grad).all() and torch.all(logp.grad[mask == 0] == 0), name
        assert {"actor/pg_clipfrac", "actor/pg_clipfrac_lower", "actor/ppo_kl"} <= set(metrics), name


def test_policy_loss_registry_errors():
    with pytest.raises(ValueError, match="has already been registered"):
        core_algos.register_policy_loss("vanilla")(lambda *a, **k: None)
    with pytest.raises(KeyError, match=r"Supported modes are: \['cispo', 'clip_cov'"):
        core_algos.get_policy_loss_fn("vanila")
    with pytest.raises(ValueError, match="must share one shape"):
        core_algos.compute_policy_loss_vanilla(
            torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(2, 4), torch.ones(2, 3)
        )


def test_losses_read_a_read_only_actor_shaped_omegaconf_node():
    from omegaconf import OmegaConf

    actor = OmegaConf.create(
        {
            "clip_ratio": 0.2,
            "clip_ratio_low": 0.2,
            "clip_ratio_high": 0.28,
            "clip_ratio_c": 3.0,
            "policy_loss": {
                "loss_mode": "kl_cov",
                "kl_cov_ratio": 0.5,
                "ppo_kl_coef": 1.0,
                "clip_cov_ratio": 0.5,
                "clip_cov_lb": -1e9,
                "clip_cov_ub": 1e9,
            },
        }
    )
    OmegaConf.set_readonly(actor, True)
    adv = torch.tensor([[1.0, -1.0, 0.5]], dtype=torch.float64)
    old, logp = logp_for([[1.25, 1.0, 1.0]])
    mask = torch.ones(1, 3, dtype=torch.float64)
    loss, _ = core_algos.compute_policy_loss_vanilla(old, logp, adv, mask, config=actor)
    assert loss.item() == pytest.approx((-1.25 + 1.0 - 0.5) / 3)  # 1.25 < 1.28: not clipped
    # kl_cov: int(0.5 * 3) = 1 token penalised, the one with the largest covariance: token 0
    # (centred A = 5/6, -7/6, 1/3; centred log pi = 2/3 log 1.25, -1/3 log 1.25, -1/3 log 1.25)
    loss, m = core_algos.compute_policy_loss_kl_cov(old, logp, adv, mask, config=actor)
    assert loss.item() == pytest.approx((-1.25 + math.log(1.25) + 1.0 - 0.5) / 3)
    assert m["actor/pg_clipfrac"] == pytest.approx(1 / 3)
