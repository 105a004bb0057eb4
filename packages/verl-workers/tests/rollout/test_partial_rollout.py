"""Partial rollouts (``ResumableGeneration``): a generation paused, given new weights and resumed
continues with the new weights. References are independent of the native loop: the hf decode loop
(the model's own forward and KV cache) run on each model separately."""

import pytest
import torch
from transformers import AutoModelForCausalLM, Qwen2Config
from verl import DataProto
from verl.trainer.config import load_config
from verl.workers.engine.testing import random_left_padded
from verl.workers.rollout.hf_rollout import SamplingParams, generate_tokens
from verl.workers.rollout.native_rollout import NativeRollout, native_generate
from verl.workers.rollout.partial_rollout import ResumableGeneration
from verl.workers.tiny import tiny_config

PAD, EOS, VOCAB = 0, 1, 48


def make_model(seed: int):
    cfg = Qwen2Config(**tiny_config(VOCAB, max_position_embeddings=128, pad_token_id=PAD, eos_token_id=EOS,
                                    tie_word_embeddings=False))  # fmt: skip
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg)
    with torch.no_grad():  # sharper than random init, so greedy paths differ per row and per model
        model.get_input_embeddings().weight.mul_(3.0)
    return model.eval()


def rollout_for(model, *overrides):
    cfg = load_config(
        ["data.max_response_length=8", "actor_rollout_ref.rollout.calculate_log_probs=true", *overrides]
    ).actor_rollout_ref.rollout
    return NativeRollout(model, cfg, None)


def prompts(lengths, seed=0, **meta):
    ids, mask, pos = random_left_padded(lengths, VOCAB, seed=seed, pad_id=PAD)
    return DataProto.from_dict(
        tensors={"input_ids": ids, "attention_mask": mask, "position_ids": pos}, meta_info=meta
    )


def test_uninterrupted_generation_samples_what_native_generate_samples():
    model = make_model(0)
    rollout = rollout_for(model)
    batch = prompts([5, 3, 7, 2, 6, 4], seed=1, do_sample=True, temperature=1.0)
    gen = ResumableGeneration(rollout, batch, generator=torch.Generator().manual_seed(7))
    assert not gen.step(3)
    assert gen.step(100)  # the rest; rows stop at EOS or at response_length
    b = batch.batch
    ref = native_generate(
        model,
        b["input_ids"],
        b["attention_mask"],
        b["position_ids"],
        rollout.sampling_params(batch.meta_info),
        rollout.eos_token_ids,
        PAD,
        calculate_log_probs=True,
        generator=torch.Generator().manual_seed(7),
    )
    got = gen.result()
    for key in ("responses", "response_mask", "input_ids", "attention_mask", "position_ids"):
        assert torch.equal(got.batch[key], ref[key]), key
    torch.testing.assert_close(got.batch["rollout_log_probs"], ref["rollout_log_probs"])
    assert (got.batch["token_segments"][got.batch["response_mask"].bool()] == 0).all()


def test_pause_and_resume_without_new_weights_changes_nothing():
    model = make_model(1)
    rollout = rollout_for(model)
    batch = prompts([4, 6, 2, 5, 3, 6], seed=3, do_sample=False)
    b = batch.batch
    params = rollout.sampling_params(batch.meta_info)
    free = native_generate(model, b["input_ids"], b["attention_mask"], b["position_ids"], params, [], PAD)
    # EOS ids that some rows emit early, others late: rows finish before, at and after the pause
    rollout.eos_token_ids = sorted({int(free["responses"][1, 1]), int(free["responses"][4, 4])})
    ref = native_generate(
        model,
        b["input_ids"],
        b["attention_mask"],
        b["position_ids"],
        params,
        rollout.eos_token_ids,
        PAD,
        calculate_log_probs=True,
    )
    gen = ResumableGeneration(rollout, batch)
    gen.step(3)
    finished_before = gen.finished.clone()
    gen.pause()
    assert gen.paused
    with pytest.raises(RuntimeError, match="paused"):
        gen.step(1)
    gen.resume()
    gen.step(100)
    got = gen.result()
    assert finished_before.any() and not finished_before.all()  # the case this test is about
    assert torch.equal(got.batch["responses"], ref["responses"])
    torch.testing.assert_close(got.batch["rollout_log_probs"], ref["rollout_log_probs"], atol=1e-5, rtol=0)
    seg = got.batch["token_segments"]
    assert (seg[:, :3][got.batch["response_mask"][:, :3].bool()] == 0).all()
    assert (seg[:, 3:][got.batch["response_mask"][:, 3:].bool()] == 1).all()


def test_tokens_after_the_weight_sync_come_from_the_new_model():
    old, new = make_model(0), make_model(5)
    module = make_model(0)  # the rollout's own copy; starts as `old`, gets `new`'s weights mid-generation
    rollout = rollout_for(module, "actor_rollout_ref.rollout.ignore_eos=true")
    batch = prompts([5, 3, 7, 4], seed=2, do_sample=False)
    b = batch.batch
    k, r = 3, 8
    gen = ResumableGeneration(rollout, batch)
    gen.step(k)
    gen.pause()
    module.load_state_dict(new.state_dict())  # the weight sync, while paused
    gen.resume()
    assert gen.step(100)
    got = gen.result()

    # reference: the old model's first k tokens, then the new model continuing that prefix (hf loop)
    def greedy(model, prefix, length, **kw):
        p = prefix
        params = SamplingParams(response_length=length, do_sample=False)
        return generate_tokens(model, p["input_ids"], p["attention_mask"], p["position_ids"], params, [], PAD, **kw)

    head = greedy(old, b, k, calculate_log_probs=True)
    tail = greedy(new, head, r - k, calculate_log_probs=True)
    assert torch.equal(got.batch["responses"][:, :k], head["responses"])
    assert torch.equal(got.batch["responses"][:, k:], tail["responses"])
    torch.testing.assert_close(
        got.batch["rollout_log_probs"][:, :k], head["rollout_log_probs"], atol=1e-5, rtol=0
    )
    torch.testing.assert_close(
        got.batch["rollout_log_probs"][:, k:], tail["rollout_log_probs"], atol=1e-5, rtol=0
    )
    assert got.batch["token_segments"].tolist() == [[0] * k + [1] * (r - k)] * 4
    # the test can fail: had the old model continued, the tail would differ
    stay = greedy(old, head, r - k)
    assert not torch.equal(stay["responses"], tail["responses"])


def test_result_of_unfinished_rows_and_unsupported_models_are_errors():
    rollout = rollout_for(make_model(0), "actor_rollout_ref.rollout.ignore_eos=true")
    gen = ResumableGeneration(rollout, prompts([3, 4], do_sample=False))
    gen.step(2)
    with pytest.raises(RuntimeError, match=r"rows \[0, 1\] are still generating"):
        gen.result()
    with pytest.raises(RuntimeError, match="without pause"):
        gen.resume()
    from transformers import GPT2Config, GPT2LMHeadModel

    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=VOCAB, n_embd=16, n_layer=1, n_head=2, eos_token_id=EOS))
    with pytest.raises(NotImplementedError, match="gpt2"):
        ResumableGeneration(rollout_for(gpt2), prompts([3], do_sample=False))


def test_grad_mode_is_untouched_between_steps_and_after_an_abandoned_generation():
    # the generation holds its weight snapshot between step() calls; it must not hold grad mode off
    # with it: a colocated update (or the next test) on this thread would silently get no gradients
    model = make_model(2)
    gen = ResumableGeneration(rollout_for(model), prompts([3, 5], seed=1, do_sample=False))
    assert torch.is_grad_enabled()
    gen.step(2)
    assert not gen.done and torch.is_grad_enabled()
    loss = model(input_ids=torch.tensor([[2, 3]])).logits.sum()
    assert loss.requires_grad  # a training forward between two decode steps records its graph
    del gen  # abandoned mid-generation, never paused
    assert torch.is_grad_enabled()
