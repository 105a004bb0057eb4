"""Sequence packing: log-probs, entropies, values and gradients equal the padded computation."""

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM, Qwen2ForTokenClassification
from verl.workers.engine.hf_model import response_outputs
from verl.workers.engine.packing import block_causal_mask, first_fit_decreasing, plan_packing
from verl.workers.engine.testing import make_rl_batch
from verl.workers.tiny import tiny_config

VOCAB = 101


def tiny(cls=Qwen2ForCausalLM, impl="sdpa", seed=0):
    cfg = Qwen2Config(**tiny_config(VOCAB, tie_word_embeddings=True, num_labels=1))
    cfg._attn_implementation = impl
    torch.manual_seed(seed)
    return cls(cfg)


def batch(n=9, seed=0):
    return make_rl_batch(n=n, prompt_len=7, response_len=6, vocab=VOCAB, seed=seed).batch


def test_first_fit_decreasing_bins_fit_and_cover():
    lengths = [5, 9, 3, 7, 2, 9, 1, 4]
    bins = first_fit_decreasing(lengths, 9)
    assert sorted(i for b in bins for i in b) == list(range(8))
    assert all(sum(lengths[i] for i in b) <= 9 for b in bins)
    assert len(bins) == 5  # 9 | 9 | 7+2 | 5+4 | 3+1 (sum 40 -> at least 5 bins of 9)
    with pytest.raises(ValueError, match="row 0 has 5 tokens"):
        first_fit_decreasing([5], 4)


def test_block_mask_is_needed_and_sufficient():
    """Packing two sequences with restarted position ids: without the mask the second one sees the first."""
    model = tiny().eval()
    a, b = torch.randint(2, VOCAB, (1, 5)), torch.randint(2, VOCAB, (1, 7))
    with torch.no_grad():
        ref = torch.cat([model(input_ids=a).logits, model(input_ids=b).logits], 1)
        ids, pos = torch.cat([a, b], 1), torch.cat([torch.arange(5), torch.arange(7)])[None]
        no_mask = model(input_ids=ids, position_ids=pos).logits
        seg = torch.tensor([[0] * 5 + [1] * 7])
        masked = model(input_ids=ids, position_ids=pos, attention_mask=block_causal_mask(seg)).logits
    assert (no_mask[0, 5:] - ref[0, 5:]).abs().max() > 1e-3
    torch.testing.assert_close(masked, ref, atol=1e-5, rtol=0)


def test_plan_packs_real_tokens_only():
    mb = batch()
    plan = plan_packing(mb["input_ids"], mb["attention_mask"])
    real = int(mb["attention_mask"].sum())
    assert int((plan.segment >= 0).sum()) == real
    assert plan.input_ids.numel() < mb["input_ids"].numel()
    # each row's tokens, read back from its bin, are the row's real tokens
    for i in range(len(mb["input_ids"])):
        n = int(mb["attention_mask"][i].sum())
        b, s = int(plan.row_bin[i]), int(plan.row_start[i])
        assert (
            plan.input_ids[b, s : s + n].tolist()
            == mb["input_ids"][i][mb["attention_mask"][i].bool()].tolist()
        )
        assert plan.position_ids[b, s : s + n].tolist() == list(range(n))


@pytest.mark.parametrize("impl", ["sdpa", "eager"])
def test_log_probs_entropy_and_grads_equal_padded(impl):
    mb = batch(seed=1)
    valid = mb["attention_mask"][:, -6:].bool()
    weights = torch.randn(valid.shape, generator=torch.Generator().manual_seed(2))
    outs, grads = [], []
    for packed in (False, True):
        model = tiny(impl=impl)
        out = response_outputs(
            model, mb, "causal_lm", temperature=0.7, calculate_entropy=True, remove_padding=packed
        )
        loss = ((out["log_probs"] + 0.1 * out["entropys"]) * weights * valid).sum()
        loss.backward()
        outs.append({k: v.detach() * valid for k, v in out.items()})
        grads.append({n: p.grad.clone() for n, p in model.named_parameters()})
    for key in ("log_probs", "entropys"):
        torch.testing.assert_close(outs[1][key], outs[0][key], atol=2e-5, rtol=0)
    assert outs[1]["log_probs"].abs().sum() > 0
    for name, g in grads[0].items():
        torch.testing.assert_close(grads[1][name], g, atol=1e-5, rtol=1e-4, msg=name)


def test_values_equal_padded():
    mb = batch(seed=3)
    valid = mb["attention_mask"][:, -6:].bool()
    model = tiny(Qwen2ForTokenClassification).eval()
    with torch.no_grad():
        padded = response_outputs(model, mb, "value")["values"]
        packed = response_outputs(model, mb, "value", remove_padding=True)["values"]
    torch.testing.assert_close(packed * valid, padded * valid, atol=1e-5, rtol=0)
    assert packed[~valid].abs().sum() == 0
