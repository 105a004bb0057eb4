"""Vocab-parallel log-probs and entropy against log_softmax over the whole (unpadded) vocabulary, values
and gradients: in one process (with padding columns) and split over 2 gloo processes (no Megatron)."""

import os

import torch
from verl.workers.engine.megatron.vocab_parallel import vocab_parallel_log_prob_entropy
from verl.workers.engine.testing import run_gloo

VOCAB, PADDED = 13, 14  # one padding column, as the tiny model's 101 -> 102 at TP=2


def _inputs():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 4, PADDED, generator=g) * 3
    target = torch.randint(0, VOCAB, (3, 4), generator=g)
    w_lp, w_ent = torch.randn(3, 4, generator=g), torch.randn(3, 4, generator=g)
    return logits, target, w_lp, w_ent


def _reference(logits, target, w_lp, w_ent):
    z = logits[..., :VOCAB].clone().requires_grad_(True)
    logp = torch.log_softmax(z, dim=-1)
    lp = logp.gather(-1, target[..., None])[..., 0]
    ent = -(logp.exp() * logp).sum(-1)
    ((lp * w_lp).sum() + (ent * w_ent).sum()).backward()
    grad = torch.zeros_like(logits)
    grad[..., :VOCAB] = z.grad
    return lp.detach(), ent.detach(), grad


def test_whole_vocab_with_padding_columns():
    logits, target, w_lp, w_ent = _inputs()
    logits[..., VOCAB:] = 50.0  # padding columns must not count, whatever they hold
    x = logits.clone().requires_grad_(True)
    lp, ent = vocab_parallel_log_prob_entropy(x, target, vocab_start=0, vocab_size=VOCAB, with_entropy=True)
    ((lp * w_lp).sum() + (ent * w_ent).sum()).backward()
    ref_lp, ref_ent, ref_grad = _reference(logits, target, w_lp, w_ent)
    torch.testing.assert_close(lp, ref_lp, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(ent, ref_ent, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(x.grad, ref_grad, atol=1e-6, rtol=1e-6)
    # without entropy: the log-prob alone, same values
    lp2, none = vocab_parallel_log_prob_entropy(logits, target, vocab_start=0, vocab_size=VOCAB)
    assert none is None and torch.equal(lp2, lp.detach())


def _split_job(rank, world, out_dir):
    import torch.distributed as dist

    logits, target, w_lp, w_ent = _inputs()
    width = PADDED // world
    mine = logits[..., rank * width:(rank + 1) * width].clone().requires_grad_(True)
    lp, ent = vocab_parallel_log_prob_entropy(mine, target, vocab_start=rank * width, vocab_size=VOCAB,
                                              group=dist.group.WORLD, with_entropy=True)
    ((lp * w_lp).sum() + (ent * w_ent).sum()).backward()
    torch.save({"lp": lp.detach(), "ent": ent.detach(), "grad": mine.grad}, os.path.join(out_dir, f"r{rank}.pt"))


def test_split_over_two_ranks_equals_the_whole_vocab(tmp_path):
    run_gloo(_split_job, 2, str(tmp_path), str(tmp_path))
    r0, r1 = (torch.load(tmp_path / f"r{r}.pt") for r in (0, 1))
    ref_lp, ref_ent, ref_grad = _reference(*_inputs())
    for r in (r0, r1):  # every rank holds the whole result
        torch.testing.assert_close(r["lp"], ref_lp, atol=1e-6, rtol=1e-6)
        torch.testing.assert_close(r["ent"], ref_ent, atol=1e-6, rtol=1e-6)
    # each rank's gradient is its slice of the whole gradient: no communication in backward
    torch.testing.assert_close(torch.cat([r0["grad"], r1["grad"]], dim=-1), ref_grad, atol=1e-6, rtol=1e-6)
