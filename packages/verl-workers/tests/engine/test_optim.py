import math

import pytest
import torch
from omegaconf import OmegaConf
from verl.workers.engine.optim import build_lr_scheduler, build_optimizer, lr_factor, warmup_steps


def _optim(**kw):
    base = dict(
        lr=0.1,
        lr_warmup_steps=-1,
        lr_warmup_steps_ratio=0.0,
        lr_scheduler_type="constant",
        min_lr_ratio=0.0,
        num_cycles=0.5,
        weight_decay=0.01,
        betas=[0.9, 0.999],
    )
    base.update(kw)
    return OmegaConf.create(base)


def _lrs(cfg, total, n):
    p = torch.nn.Parameter(torch.zeros(1))
    opt = build_optimizer([p], cfg)
    sched = build_lr_scheduler(opt, cfg, total)
    out = []
    for _ in range(n):
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return out


def test_constant_with_warmup_steps():
    assert _lrs(_optim(lr_warmup_steps=4), 10, 6) == pytest.approx([0.0, 0.025, 0.05, 0.075, 0.1, 0.1])


def test_warmup_ratio_uses_total_steps():
    assert warmup_steps(_optim(lr_warmup_steps_ratio=0.25), 20) == 5
    with pytest.raises(ValueError, match="total_training_steps"):
        warmup_steps(_optim(lr_warmup_steps_ratio=0.25), None)


def test_cosine_decays_to_min_ratio():
    cfg = _optim(lr_scheduler_type="cosine", lr_warmup_steps=2, min_lr_ratio=0.1)
    lrs = _lrs(cfg, 12, 13)
    assert lrs[:3] == pytest.approx([0.0, 0.05, 0.1])
    # halfway through the 10 decay steps: 0.1 * (0.1 + 0.9 * 0.5)
    assert lrs[7] == pytest.approx(0.1 * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 0.5))))
    assert lrs[12] == pytest.approx(0.01)


def test_bad_scheduler_and_betas_name_the_value():
    with pytest.raises(ValueError, match="'linear'"):
        lr_factor(5, _optim(lr_scheduler_type="linear"), 10)
    with pytest.raises(ValueError, match="betas"):
        build_optimizer([torch.nn.Parameter(torch.zeros(1))], _optim(betas=[0.9]))
    with pytest.raises(ValueError, match="cosine"):
        build_lr_scheduler(
            torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1),
            _optim(lr_scheduler_type="cosine"),
            None,
        )


def test_plain_cpu_params_take_fused_adamw_with_foreachs_update():
    # the fused step must give the update the foreach step gave before it (float rounding apart)
    torch.manual_seed(0)
    shapes = [(64, 32), (32,), (101, 16)]
    init = [torch.randn(s) for s in shapes]
    cfg = _optim(lr=1e-2, weight_decay=0.1, betas=[0.8, 0.95])
    fused = [torch.nn.Parameter(t.clone()) for t in init]
    ref = [torch.nn.Parameter(t.clone()) for t in init]
    opt = build_optimizer(fused, cfg)
    assert opt.defaults["fused"] and not opt.defaults["foreach"]
    ref_opt = torch.optim.AdamW(ref, lr=1e-2, weight_decay=0.1, betas=(0.8, 0.95), foreach=True)
    for step in range(5):
        grads = [torch.randn(s) * (step + 1) for s in shapes]
        for ps, o in ((fused, opt), (ref, ref_opt)):
            for p, g in zip(ps, grads):
                p.grad = g.clone()
            torch.nn.utils.clip_grad_norm_(ps, 1.0)
            o.step()
            o.zero_grad(set_to_none=True)
    for a, b, t in zip(fused, ref, init):
        assert not torch.equal(a, t)
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)


def test_params_off_cpu_keep_foreach_adamw():
    p = torch.nn.Parameter(torch.zeros(4, device="meta"))
    opt = build_optimizer([p], _optim())
    assert opt.defaults["foreach"] and not opt.defaults["fused"]
