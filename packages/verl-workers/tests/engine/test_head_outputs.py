"""The actor's per-token outputs (hf_model.response_outputs) against the plain computation: full logits,
the response positions sliced out, / temperature, log_softmax, entropy from the softmax. The engine's
shortcuts (LM head on the response positions only, no division at temperature 1, the metric entropy
from the log-probs' log-softmax) must give the same values and gradients."""

import pytest
import torch
from transformers import AutoModelForCausalLM
from verl.workers.engine.hf_model import _takes_logits_to_keep, response_outputs
from verl.workers.engine.testing import make_rl_batch


def _plain(model, b, temperature):
    logits = model(
        input_ids=b["input_ids"], attention_mask=b["attention_mask"], position_ids=b["position_ids"]
    ).logits
    r = b["responses"].shape[1]
    z = logits[:, -r - 1 : -1] / temperature
    logp = torch.log_softmax(z, dim=-1).gather(-1, b["responses"][..., None])[..., 0]
    p = torch.softmax(z.detach(), dim=-1)
    ent = -(p * torch.log(p)).sum(-1)
    return logp, ent


@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("entropy_grad", [False, True])
def test_response_outputs_match_plain_logits(tiny_model_dir, temperature, entropy_grad):
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    assert _takes_logits_to_keep(model)  # the shortcut is what runs here
    b = make_rl_batch(n=6, prompt_len=5, response_len=7, seed=4).batch
    mask = b["response_mask"].bool()
    w = torch.randn(b["responses"].shape)

    out = response_outputs(
        model, b, "causal_lm", temperature=temperature, calculate_entropy=True, entropy_grad=entropy_grad
    )
    loss = (out["log_probs"] * w * mask).sum()
    if entropy_grad:
        loss = loss + (out["entropys"] * mask).sum()
    else:
        assert not out["entropys"].requires_grad
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)

    logp, ent = _plain(model, b, temperature)
    ref_loss = (logp * w * mask).sum()
    if entropy_grad:
        logits = model(
            input_ids=b["input_ids"], attention_mask=b["attention_mask"], position_ids=b["position_ids"]
        ).logits
        r = b["responses"].shape[1]
        z = logits[:, -r - 1 : -1] / temperature
        ref_loss = ref_loss + ((torch.logsumexp(z, -1) - (torch.softmax(z, -1) * z).sum(-1)) * mask).sum()
    ref_loss.backward()

    torch.testing.assert_close(out["log_probs"][mask], logp[mask], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out["entropys"][mask], ent[mask], rtol=1e-5, atol=1e-5)
    for n, p in model.named_parameters():
        torch.testing.assert_close(grads[n], p.grad, rtol=1e-4, atol=1e-6, msg=n)
