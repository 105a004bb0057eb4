"""The chunked LM head + log-prob/entropy against the unfused logits path (values and gradients)."""

import pytest
import torch
from verl.utils.torch_functional import entropy_from_logits, logprobs_from_logits
from verl.workers.engine.fused_logprob import fused_log_prob_entropy


def _reference(hidden, weight, labels, temperature):
    logits = (hidden @ weight.t()).float() / temperature
    return logprobs_from_logits(logits, labels), entropy_from_logits(logits)


@pytest.mark.parametrize("temperature, chunk", [(1.0, 7), (0.6, 64), (1.3, 1000)])
def test_fused_matches_unfused_values_and_gradients(temperature, chunk):
    g = torch.Generator().manual_seed(0)
    tokens, hidden_size, vocab = 37, 16, 301  # 37 tokens: chunks of 7 leave a ragged last chunk
    hidden = torch.randn(3, tokens, hidden_size, generator=g, dtype=torch.float64).float()
    weight = torch.randn(vocab, hidden_size, generator=g) * 0.5
    labels = torch.randint(0, vocab, (3, tokens), generator=g)
    w_lp, w_ent = torch.randn(3, tokens, generator=g), torch.randn(3, tokens, generator=g)

    h1, W1 = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
    lp, ent = fused_log_prob_entropy(h1, W1, labels, temperature, chunk_size=chunk)
    ((lp * w_lp).sum() + (ent * w_ent).sum()).backward()

    h2, W2 = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
    ref_lp, ref_ent = _reference(h2, W2, labels, temperature)
    ((ref_lp * w_lp).sum() + (ref_ent * w_ent).sum()).backward()

    assert lp.shape == ent.shape == (3, tokens) and lp.dtype == torch.float32
    torch.testing.assert_close(lp, ref_lp, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ent, ref_ent, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(h1.grad, h2.grad, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(W1.grad, W2.grad, atol=1e-5, rtol=1e-4)


def test_gradient_of_log_probs_only_and_against_finite_differences():
    g = torch.Generator().manual_seed(1)
    hidden = torch.randn(5, 4, generator=g, dtype=torch.float64)
    weight = torch.randn(11, 4, generator=g, dtype=torch.float64)
    labels = torch.randint(0, 11, (5,), generator=g)

    def f(h, w):
        lp, ent = fused_log_prob_entropy(h, w, labels, 0.7, chunk_size=2)
        return lp, ent

    # float64 gradcheck of both outputs (an independent numerical derivative)
    assert torch.autograd.gradcheck(f, (hidden.requires_grad_(), weight.requires_grad_()))
    # only the log-probs used: the entropy branch of the backward gets no gradient
    h = hidden.detach().clone().requires_grad_()
    lp, _ = fused_log_prob_entropy(h, weight.detach(), labels, 0.7, chunk_size=2)
    lp.sum().backward()
    h_ref = hidden.detach().clone().requires_grad_()
    logprobs_from_logits((h_ref @ weight.detach().t()) / 0.7, labels).sum().backward()
    # (the reference computes in fp32: logprobs_from_logits casts)
    torch.testing.assert_close(h.grad, h_ref.grad, atol=1e-5, rtol=1e-5)


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="temperature=0"):
        fused_log_prob_entropy(torch.zeros(2, 3), torch.zeros(4, 3), torch.zeros(2, dtype=torch.long), 0)
    with pytest.raises(ValueError, match="do not match"):
        fused_log_prob_entropy(torch.zeros(2, 3), torch.zeros(4, 3), torch.zeros(3, dtype=torch.long))
