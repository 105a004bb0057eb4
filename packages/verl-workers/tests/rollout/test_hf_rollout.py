"""HF rollout decode loop: shapes, EOS/pad handling, greedy == argmax loop, log-probs == recomputation."""

import pytest
import torch
from verl.workers.engine.testing import random_left_padded
from verl.workers.rollout.hf_rollout import SamplingParams, filter_logits, generate_tokens

PAD, EOS = 0, 1


def left_padded_prompts(lengths, vocab=48, seed=0):
    return random_left_padded(lengths, vocab, seed=seed, pad_id=PAD)


def full_forward_logits(model, input_ids, attention_mask, position_ids):
    with torch.no_grad():
        return model(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids
        ).logits.float()


def manual_greedy(model, ids, mask, pos, steps):
    """Argmax decoding with a full forward pass per step (no KV cache), stopping rows at EOS."""
    out = []
    for i in range(ids.shape[0]):
        row_ids, row_mask, row_pos = ids[i : i + 1], mask[i : i + 1], pos[i : i + 1]
        toks = []
        for _ in range(steps):
            logits = full_forward_logits(model, row_ids, row_mask, row_pos)[0, -1]
            t = int(logits.argmax())
            toks.append(t)
            if t == EOS:
                break
            row_ids = torch.cat([row_ids, torch.tensor([[t]])], dim=1)
            row_mask = torch.cat([row_mask, torch.ones(1, 1, dtype=row_mask.dtype)], dim=1)
            row_pos = torch.cat([row_pos, row_pos[:, -1:] + 1], dim=1)
        out.append(toks)
    return out


def test_greedy_equals_manual_argmax_loop(rollout_model):
    ids, mask, pos = left_padded_prompts([5, 3, 7, 1])
    params = SamplingParams(response_length=10, do_sample=False)
    got = generate_tokens(rollout_model, ids, mask, pos, params, [EOS], PAD)
    expected = manual_greedy(rollout_model, ids, mask, pos, 10)
    r = got["responses"].shape[1]
    assert r == max(len(t) for t in expected)
    for i, toks in enumerate(expected):
        n = len(toks)
        assert got["responses"][i, :n].tolist() == toks
        assert got["response_mask"][i].tolist() == [1] * n + [0] * (r - n)
        assert got["responses"][i, n:].tolist() == [PAD] * (r - n)


def test_output_layout_matches_contract(rollout_model):
    ids, mask, pos = left_padded_prompts([4, 6, 2])
    params = SamplingParams(response_length=6, do_sample=True, temperature=0.8, top_k=10, top_p=0.9)
    torch.manual_seed(1)
    got = generate_tokens(rollout_model, ids, mask, pos, params, [EOS], PAD, calculate_log_probs=True)
    b, p = ids.shape
    r = got["responses"].shape[1]
    assert 1 <= r <= 6
    assert torch.equal(got["prompts"], ids)
    assert torch.equal(got["input_ids"], torch.cat([ids, got["responses"]], 1))
    assert torch.equal(got["attention_mask"], torch.cat([mask, got["response_mask"]], 1))
    for key in ("responses", "response_mask", "rollout_log_probs"):
        assert got[key].shape == (b, r)
    # position ids continue from the last prompt position, pads included
    last = pos[:, -1:]
    assert torch.equal(got["position_ids"][:, p:], last + torch.arange(1, r + 1))
    # the mask is 1 up to and including the first EOS, 0 after; masked tokens are pads
    for i in range(b):
        row = got["responses"][i].tolist()
        n = row.index(EOS) + 1 if EOS in row else r
        assert got["response_mask"][i].tolist() == [1] * n + [0] * (r - n)
        assert row[n:] == [PAD] * (r - n)
    assert (got["rollout_log_probs"] * (1 - got["response_mask"])).abs().sum() == 0


def test_response_length_caps_generation(rollout_model):
    ids, mask, pos = left_padded_prompts([3, 3])
    # EOS that can never be sampled: every row runs to the cap
    got = generate_tokens(rollout_model, ids, mask, pos, SamplingParams(response_length=4), [999], PAD)
    assert got["responses"].shape == (2, 4)
    assert got["response_mask"].sum() == 8


@pytest.mark.parametrize("temperature,top_k,top_p", [(1.0, -1, 1.0), (0.7, 5, 0.8)])
def test_rollout_log_probs_match_plain_forward(rollout_model, temperature, top_k, top_p):
    ids, mask, pos = left_padded_prompts([6, 2, 4, 5], seed=3)
    params = SamplingParams(response_length=8, temperature=temperature, top_k=top_k, top_p=top_p)
    torch.manual_seed(2)
    got = generate_tokens(rollout_model, ids, mask, pos, params, [EOS], PAD, calculate_log_probs=True)
    p, r = ids.shape[1], got["responses"].shape[1]
    # Recompute as the actor does: one forward over prompt+response, logits/T, log_softmax, gather.
    logits = full_forward_logits(rollout_model, got["input_ids"], got["attention_mask"], got["position_ids"])
    logits = logits[:, p - 1 : p + r - 1] / temperature
    expected = torch.log_softmax(logits, -1).gather(-1, got["responses"].unsqueeze(-1)).squeeze(-1)
    expected = expected * got["response_mask"]
    torch.testing.assert_close(got["rollout_log_probs"], expected, atol=1e-4, rtol=1e-4)


def test_sampling_respects_top_k_and_rows_differ(rollout_model):
    # 16 copies of one prompt (what the trainer sends for n=16): samples must vary between rows,
    # and with top_k=1 sampling collapses to greedy.
    ids, mask, pos = left_padded_prompts([4])
    ids, mask, pos = (t.repeat(16, 1) for t in (ids, mask, pos))
    torch.manual_seed(0)
    got = generate_tokens(rollout_model, ids, mask, pos, SamplingParams(response_length=5), [999], PAD)
    assert got["responses"].shape == (16, 5)
    assert len({tuple(r) for r in got["responses"].tolist()}) > 1
    top1 = generate_tokens(
        rollout_model, ids, mask, pos, SamplingParams(response_length=5, top_k=1), [999], PAD
    )
    greedy = generate_tokens(rollout_model, ids, mask, pos, SamplingParams(5, do_sample=False), [999], PAD)
    assert torch.equal(top1["responses"], greedy["responses"])


def test_filter_logits_by_hand():
    logits = torch.log(torch.tensor([[0.5, 0.2, 0.15, 0.1, 0.05]]))
    inf = float("-inf")
    kept = lambda x: [v != inf for v in x[0].tolist()]  # noqa: E731
    assert kept(filter_logits(logits, top_k=2, top_p=1.0)) == [True, True, False, False, False]
    # cumulative 0.5, 0.7, 0.85: top_p=0.8 keeps the first three (0.7 < 0.8 still needs the third)
    assert kept(filter_logits(logits, top_k=-1, top_p=0.8)) == [True, True, True, False, False]
    assert kept(filter_logits(logits, top_k=-1, top_p=0.5)) == [True, False, False, False, False]
    assert kept(filter_logits(logits, top_k=-1, top_p=1.0)) == [True] * 5
    # both filters: top_k first, then the nucleus over the renormalised survivors
    # (0.5, 0.2, 0.15 -> 0.588, 0.235, 0.176; 0.588 < 0.6 needs the second, 0.824 >= 0.6 stops)
    assert kept(filter_logits(logits[:, [4, 3, 2, 1, 0]], top_k=3, top_p=0.6)) == [
        False,
        False,
        False,
        True,
        True,
    ]


def test_concat_generations_pads_shorter_chunks():
    from verl.workers.rollout.hf_rollout import concat_generations

    def chunk(prompt, resp, pos0):
        p, r = len(prompt), len(resp)
        return {
            "prompts": torch.tensor([prompt]),
            "responses": torch.tensor([resp]),
            "response_mask": torch.ones(1, r, dtype=torch.long),
            "rollout_log_probs": -torch.ones(1, r),
            "input_ids": torch.tensor([prompt + resp]),
            "attention_mask": torch.ones(1, p + r, dtype=torch.long),
            "position_ids": torch.arange(pos0, pos0 + p + r).unsqueeze(0),
        }

    out = concat_generations([chunk([5, 6], [7, EOS], 0), chunk([8, 9], [3, 4, 5], 0)], PAD)
    assert out["responses"].tolist() == [[7, EOS, PAD], [3, 4, 5]]
    assert out["response_mask"].tolist() == [[1, 1, 0], [1, 1, 1]]
    assert out["rollout_log_probs"].tolist() == [[-1, -1, 0], [-1, -1, -1]]
    assert out["input_ids"].tolist() == [[5, 6, 7, EOS, PAD], [8, 9, 3, 4, 5]]
    assert out["attention_mask"].tolist() == [[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]]
    assert out["position_ids"].tolist() == [[0, 1, 2, 3, 4], [0, 1, 2, 3, 4]]
