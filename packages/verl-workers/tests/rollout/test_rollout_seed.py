"""Rollout sampling is seeded: one generator per worker from ``rollout.seed + rank``
(``verl.workers.rollout.base.rollout_generator``), for the hf and the native engine alike."""

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from verl.trainer.config import load_config
from verl.workers.engine.testing import chat_prompt_batch
from verl.workers.rollout import HFRollout, NativeRollout, rollout_generator


def _cfg(*overrides):
    return load_config(["data.max_response_length=6", *overrides]).actor_rollout_ref.rollout


@pytest.fixture(scope="module")
def model_tok(tiny_model_dir):
    return AutoModelForCausalLM.from_pretrained(tiny_model_dir), AutoTokenizer.from_pretrained(tiny_model_dir)


def _sample(engine_cls, model_tok, *overrides, rank=0, calls=2):
    model, tok = model_tok
    prompts = chat_prompt_batch(tok, ["1+2=", "33+44=", "hi"], n=4)
    rollout = engine_cls(model, _cfg(*overrides), tok, rank=rank)
    # successive calls continue the same generator: a run's steps differ, two runs agree
    return [rollout.generate_sequences(prompts).batch["responses"] for _ in range(calls)]


@pytest.mark.parametrize("engine_cls", [HFRollout, NativeRollout])
def test_same_seed_same_tokens_other_seed_or_rank_other_tokens(engine_cls, model_tok):
    first = _sample(engine_cls, model_tok)
    again = _sample(engine_cls, model_tok)
    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))
    assert not torch.equal(first[0], first[1])  # the second call drew new numbers
    other_seed = _sample(engine_cls, model_tok, "actor_rollout_ref.rollout.seed=43")
    other_rank = _sample(engine_cls, model_tok, rank=1)
    assert not torch.equal(other_seed[0], first[0])
    assert not torch.equal(other_rank[0], first[0])


def test_rollout_generator_is_seed_plus_rank():
    cfg = _cfg("actor_rollout_ref.rollout.seed=10")
    a = torch.rand(4, generator=rollout_generator(cfg, rank=2))
    b = torch.rand(4, generator=torch.Generator().manual_seed(12))
    assert torch.equal(a, b)


@pytest.mark.gpu
def test_rollout_on_cuda_takes_cpu_prompts_and_returns_cpu_tensors(tiny_model_dir):
    """GPU only (not run on CPU machines): prompts arrive on the CPU, the module and the generator live
    on the GPU, the outputs go back to the CPU."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).cuda()
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    prompts = chat_prompt_batch(tok, ["1+2=", "hi"])
    for engine_cls in (HFRollout, NativeRollout):
        rollout = engine_cls(model, _cfg(), tok)
        assert rollout.device.type == "cuda" and rollout.generator.device.type == "cuda"
        out = rollout.generate_sequences(prompts)
        assert all(v.device.type == "cpu" for v in out.batch.values())
