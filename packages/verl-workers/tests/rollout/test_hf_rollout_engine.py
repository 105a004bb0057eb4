"""HFRollout through its public seam: registry lookup, DataProto in/out, config and meta_info."""

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from verl.registries import ROLLOUT_ENGINES
from verl.trainer.config import load_config
from verl.workers.engine.testing import chat_prompt_batch as prompt_batch
from verl.workers.rollout import HFRollout
from verl.workers.rollout.base import build_rollout


def rollout_config(*overrides):
    cfg = load_config(["data.max_response_length=6", *overrides])
    return cfg.actor_rollout_ref.rollout


@pytest.fixture
def model_and_tokenizer(tiny_model_dir):
    return AutoModelForCausalLM.from_pretrained(tiny_model_dir), AutoTokenizer.from_pretrained(tiny_model_dir)


def test_registered_as_hf():
    assert ROLLOUT_ENGINES.get("hf") is HFRollout


def test_generate_sequences_contract_and_micro_batches(model_and_tokenizer):
    model, tok = model_and_tokenizer
    model.train()  # as the actor leaves it
    prompts = prompt_batch(tok, ["1+2=", "33+44=", "5+6=", "7+81="], {"do_sample": False})
    whole = build_rollout(
        "hf",
        module=model,
        config=rollout_config("actor_rollout_ref.rollout.calculate_log_probs=true"),
        tokenizer=tok,
    )
    out = whole.generate_sequences(prompts)
    r = out.batch["responses"].shape[1]
    assert len(out) == 4 and 1 <= r <= 6
    assert torch.equal(out.batch["prompts"], prompts.batch["input_ids"])
    assert out.batch["rollout_log_probs"].shape == (4, r)
    assert model.training is True  # restored after generation
    # micro-batches of 1 prompt: same greedy tokens, padded to the same longest length
    split = HFRollout(
        model,
        rollout_config(
            "actor_rollout_ref.rollout.calculate_log_probs=true",
            "actor_rollout_ref.rollout.micro_batch_size=1",
        ),
        tok,
    )
    out1 = split.generate_sequences(prompts)
    for key in ("responses", "response_mask", "input_ids", "attention_mask", "position_ids"):
        assert torch.equal(out1.batch[key], out.batch[key]), key
    torch.testing.assert_close(
        out1.batch["rollout_log_probs"], out.batch["rollout_log_probs"], atol=1e-5, rtol=0
    )


def test_meta_info_and_val_kwargs_choose_sampling(model_and_tokenizer):
    model, tok = model_and_tokenizer
    rollout = HFRollout(
        model,
        rollout_config("actor_rollout_ref.rollout.temperature=0.7", "actor_rollout_ref.rollout.top_k=5"),
        tok,
    )
    p = rollout.sampling_params({})
    assert (p.do_sample, p.temperature, p.top_k, p.response_length) == (True, 0.7, 5, 6)
    assert rollout.sampling_params({"do_sample": False}).do_sample is False
    # validation uses val_kwargs (defaults: greedy, no top-k); log-probs keep the training temperature
    v = rollout.sampling_params({"validate": True})
    assert (v.do_sample, v.top_k, v.temperature) == (False, -1, 0.7)
    rollout2 = HFRollout(
        model,
        rollout_config(
            "actor_rollout_ref.rollout.val_kwargs.do_sample=true",
            "actor_rollout_ref.rollout.val_kwargs.temperature=0.5",
            "actor_rollout_ref.rollout.val_kwargs.top_p=0.9",
        ),
        tok,
    )
    v2 = rollout2.sampling_params({"validate": True})
    assert (v2.do_sample, v2.temperature, v2.top_p) == (True, 0.5, 0.9)


def test_validate_greedy_is_deterministic_and_ignore_eos_runs_full_length(model_and_tokenizer):
    model, tok = model_and_tokenizer
    prompts = prompt_batch(tok, ["12+3=", "4+4="], {"validate": True})
    rollout = HFRollout(model, rollout_config(), tok)
    a, b = rollout.generate_sequences(prompts), rollout.generate_sequences(prompts)
    assert torch.equal(a.batch["responses"], b.batch["responses"])
    full = HFRollout(model, rollout_config("actor_rollout_ref.rollout.ignore_eos=true"), tok)
    out = full.generate_sequences(prompts)
    assert out.batch["responses"].shape == (2, 6) and int(out.batch["response_mask"].sum()) == 12


def test_eos_and_pad_come_from_tokenizer_and_generation_config(model_and_tokenizer):
    model, tok = model_and_tokenizer
    rollout = HFRollout(model, rollout_config(), tok)
    assert rollout.eos_token_ids == [tok.eos_token_id] and rollout.pad_token_id == tok.pad_token_id
