"""agg_loss modes and their split invariance, KL estimators and controllers, value/entropy losses."""

import math
from types import SimpleNamespace

import pytest
import torch
from omegaconf import OmegaConf
from verl.trainer.ppo import core_algos
from verl.trainer.ppo.core_algos import GlobalBatchInfo, agg_loss

LOSS = torch.tensor([[1.0, 2.0, 3.0, 100.0], [4.0, 100.0, 100.0, 100.0], [100.0] * 4], dtype=torch.float64)
MASK = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0]], dtype=torch.float64)  # row 2: all padding


@pytest.mark.parametrize(
    "mode, want",
    [
        ("token-mean", (1 + 2 + 3 + 4) / 4),
        ("token-sum", 10.0),
        ("seq-mean-token-sum", (6 + 4) / 2),  # the all-padding row is not a sequence
        ("seq-mean-token-mean", (2 + 4) / 2),
        ("seq-mean-token-sum-norm", (6 + 4) / 2 / 4),  # / padded length 4
    ],
)
def test_agg_loss_modes_by_hand(mode, want):
    assert agg_loss(LOSS, MASK, mode).item() == pytest.approx(want)


def test_agg_loss_errors_and_empty_batch():
    with pytest.raises(ValueError, match="unknown loss_agg_mode 'mean'; known: token-mean"):
        agg_loss(LOSS, MASK, "mean")
    with pytest.raises(ValueError, match=r"\(3, 4\) != loss_mask shape \(3, 3\)"):
        agg_loss(LOSS, MASK[:, :3], "token-mean")
    for mode in core_algos.LOSS_AGG_MODES:
        assert agg_loss(LOSS, torch.zeros_like(MASK), mode).item() == 0.0


@pytest.mark.parametrize("mode", core_algos.LOSS_AGG_MODES)
def test_split_over_workers_and_micro_batches_sums_to_full_batch(mode):
    g = torch.Generator().manual_seed(0)
    loss = torch.randn(10, 6, generator=g, dtype=torch.float64)
    lengths = [6, 1, 0, 3, 5, 2, 6, 4, 1, 3]
    mask = torch.tensor([[1.0] * n + [0.0] * (6 - n) for n in lengths], dtype=torch.float64)
    full = agg_loss(loss, mask, mode)
    # 2 workers, each with its own (unequal) micro-batches; counts combined as an all-reduce would
    workers = [[slice(0, 2), slice(2, 5)], [slice(5, 6), slice(6, 10)]]
    shares = [GlobalBatchInfo.from_mask(mask[ws[0].start : ws[-1].stop]) for ws in workers]
    info = shares[0] + shares[1]
    assert info == GlobalBatchInfo.from_mask(mask)
    total = sum(agg_loss(loss[s], mask[s], mode, global_batch_info=info) for ws in workers for s in ws)
    assert total.item() == pytest.approx(full.item(), rel=1e-12)
    # without global counts, averaging micro-batch losses is NOT the full-batch value for mean modes
    if mode not in ("token-sum",):
        naive = sum(agg_loss(loss[s], mask[s], mode) for ws in workers for s in ws) / 4
        assert abs(naive.item() - full.item()) > 1e-6


def test_global_batch_info_all_reduce_single_process(tmp_path):
    import torch.distributed as dist

    if dist.is_initialized():
        pytest.skip("a process group already exists in this session")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'pg'}", rank=0, world_size=1)
    try:
        info = GlobalBatchInfo(global_token_count=7, global_seq_count=3).all_reduce()
        assert (info.global_token_count, info.global_seq_count) == (7.0, 3.0)
    finally:
        dist.destroy_process_group()


def test_kl_penalty_types_by_hand():
    logp = torch.tensor([-1.0, -2.0, -0.5, 0.0], dtype=torch.float64)
    ref = torch.tensor([-1.5, -1.0, -0.5, -60.0], dtype=torch.float64)
    d = logp - ref
    assert torch.allclose(core_algos.kl_penalty(logp, ref, "kl"), d)
    assert torch.allclose(core_algos.kl_penalty(logp, ref, "k1"), d)
    assert torch.allclose(core_algos.kl_penalty(logp, ref, "abs"), d.abs())
    assert torch.allclose(core_algos.kl_penalty(logp, ref, "mse"), 0.5 * d**2)
    k3 = core_algos.kl_penalty(logp, ref, "low_var_kl")
    for i in range(3):
        x = ref[i].item() - logp[i].item()
        assert k3[i].item() == pytest.approx(math.exp(x) - x - 1)
    # x = -60 is clamped to -20 first: e^-20 + 20 - 1 ~ 19, then clamped to 10
    assert k3[3].item() == pytest.approx(10.0)
    assert torch.equal(core_algos.kl_penalty(logp, ref, "k3"), k3)
    with pytest.raises(ValueError, match="unknown kl_penalty 'k4'; known: kl, k1"):
        core_algos.kl_penalty(logp, ref, "k4")


@pytest.mark.parametrize("kind", ["k1+", "k3+", "low_var_kl+"])
def test_straight_through_kl_value_of_one_gradient_of_k2(kind):
    logp = torch.tensor([-1.0, -2.0, -0.3], dtype=torch.float64, requires_grad=True)
    ref = torch.tensor([-1.5, -1.0, -0.4], dtype=torch.float64)
    out = core_algos.kl_penalty(logp, ref, kind)
    assert torch.allclose(out, core_algos.kl_penalty(logp.detach(), ref, kind.rstrip("+")))
    out.sum().backward()
    assert torch.allclose(logp.grad, (logp - ref).detach())  # d/dlogp of 0.5 (logp - ref)^2


def test_adaptive_kl_controller_follows_the_formula():
    ctl = core_algos.get_kl_controller(
        SimpleNamespace(type="adaptive", kl_coef=0.1, target_kl=0.05, horizon=1000)
    )
    ctl.update(current_kl=0.06, n_steps=100)  # error 0.2 (exactly at the clip)
    assert ctl.value == pytest.approx(0.1 * (1 + 0.2 * 100 / 1000))
    before = ctl.value
    ctl.update(current_kl=0.045, n_steps=50)  # error -0.1
    assert ctl.value == pytest.approx(before * (1 - 0.1 * 50 / 1000))
    before = ctl.value
    ctl.update(current_kl=10.0, n_steps=10)  # error clipped to +0.2
    assert ctl.value == pytest.approx(before * (1 + 0.2 * 10 / 1000))
    restored = core_algos.AdaptiveKLController(0.5, 0.05, 1000)
    restored.load_state_dict(ctl.state_dict())
    assert restored.value == ctl.value

    fixed = core_algos.get_kl_controller(OmegaConf.create({"type": "fixed", "kl_coef": 0.02}))
    fixed.update(current_kl=5.0, n_steps=10)
    assert fixed.value == 0.02
    with pytest.raises(ValueError, match="unknown algorithm.kl_ctrl.type 'pid'"):
        core_algos.get_kl_controller(SimpleNamespace(type="pid", kl_coef=0.1))


def test_compute_kl_in_reward_by_hand():
    scores = torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 2.0]], dtype=torch.float64)
    old = torch.tensor([[-1.0, -1.0, -9.0], [-2.0, -1.0, -1.0]], dtype=torch.float64)
    ref = torch.tensor([[-1.5, -1.5, 0.0], [-1.0, -1.0, -2.0]], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]], dtype=torch.float64)
    ctl = core_algos.AdaptiveKLController(0.1, 0.1, 100)
    rewards, metrics = core_algos.compute_kl_in_reward(scores, old, ref, mask, ctl, "kl")
    kl = torch.tensor([[0.5, 0.5, 0.0], [-1.0, 0.0, 1.0]], dtype=torch.float64)
    assert torch.allclose(rewards, scores - 0.1 * kl)
    current = (1.0 / 2 + 0.0 / 3) / 2  # mean over rows of each row's token mean
    assert metrics["actor/reward_kl_penalty"] == pytest.approx(current)
    assert metrics["actor/reward_kl_penalty_coeff"] == 0.1
    assert ctl.value == pytest.approx(0.1 * (1 + 0.2 * 2 / 100))  # error 0.25/0.1 - 1 clipped to 0.2


def test_value_loss_clipping_by_hand():
    vpreds = torch.tensor([[1.0, 0.0, 2.0, 5.0]], dtype=torch.float64)
    values = torch.tensor([[0.0, 0.0, 1.9, 0.0]], dtype=torch.float64)
    returns = torch.tensor([[0.0, 1.0, 3.0, 0.0]], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 0]], dtype=torch.float64)
    loss, clipfrac = core_algos.compute_value_loss(vpreds, returns, values, mask, cliprange_value=0.5)
    # token 0: clipped pred 0.5 -> errors 1 vs 0.25 -> 1 (unclipped larger)
    # token 1: pred inside range -> 1; token 2: clipped pred 2.0 == pred -> 1
    assert loss.item() == pytest.approx(0.5 * (1 + 1 + 1) / 3)
    assert clipfrac.item() == 0.0
    vpreds2 = torch.tensor([[-1.0, 0.0, 2.0, 5.0]], dtype=torch.float64)
    returns2 = torch.tensor([[-3.0, 1.0, 3.0, 0.0]], dtype=torch.float64)
    # token 0: pred -1 -> clipped to -0.5: errors 4 vs 6.25 -> the clipped one wins
    loss2, clipfrac2 = core_algos.compute_value_loss(vpreds2, returns2, values, mask, 0.5)
    assert loss2.item() == pytest.approx(0.5 * (6.25 + 1 + 1) / 3)
    assert clipfrac2.item() == pytest.approx(1 / 3)


def test_entropy_from_logits_stable_and_correct():
    logits = torch.tensor([[[0.0, 0.0, 0.0, 0.0], [1e4, 0.0, -1e4, 5.0], [2.0, 1.0, 0.5, -1.0]]])
    ent = core_algos.entropy_from_logits(logits)
    assert ent[0, 0].item() == pytest.approx(math.log(4), rel=1e-6)
    assert ent[0, 1].item() == pytest.approx(0.0, abs=1e-4) and torch.isfinite(ent).all()
    p = torch.softmax(logits[0, 2].double(), -1)
    assert ent[0, 2].item() == pytest.approx(-(p * p.log()).sum().item(), rel=1e-5)
    mask = torch.tensor([[1.0, 0.0, 1.0]])
    loss = core_algos.compute_entropy_loss(logits, mask)
    assert loss.item() == pytest.approx((ent[0, 0] + ent[0, 2]).item() / 2, rel=1e-6)
