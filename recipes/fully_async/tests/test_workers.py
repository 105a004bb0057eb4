"""The pools' worker in this process (world size 1, gloo), without Ray: waves stream whole prompt groups,
pause and resume across a weight change, and after a transfer the rollout copy samples what the trainer's
model samples."""

import pytest
import torch
from transformers import AutoTokenizer
from verl.trainer.config import load_config
from verl.workers.engine.testing import chat_prompt_batch
from verl_recipe_fully_async.weight_transfer import buckets_of, receive_into
from verl_recipe_fully_async.workers import AsyncActorRolloutWorker

from .in_process import gloo_world_of_one

TEXTS = ["1+2=", "40+5=", "7+7=", "12+9="]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from verl.workers.tiny import build_tiny_qwen2

    gloo_world_of_one(tmp_path_factory.mktemp("dist"))
    path = tmp_path_factory.mktemp("tiny")
    build_tiny_qwen2(path, size="xs", seed=0)
    return str(path)


def worker(model_dir, role, *overrides):
    cfg = load_config(
        [
            f"actor_rollout_ref.model.path={model_dir}",
            "actor_rollout_ref.model.enable_gradient_checkpointing=false",
            "data.max_prompt_length=16",
            "data.max_response_length=6",
            "actor_rollout_ref.rollout.n=2",
            "actor_rollout_ref.actor.ppo_mini_batch_size=4",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8",
            "actor_rollout_ref.actor.optim.lr=0.05",
            "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8",
            "actor_rollout_ref.rollout.calculate_log_probs=true",
            "actor_rollout_ref.rollout.name=native",
            *overrides,
        ]
    )
    w = AsyncActorRolloutWorker(cfg.actor_rollout_ref, role=role, total_training_steps=4)
    w.init_model()
    return w


def greedy_prompts(model_dir):
    tok = AutoTokenizer.from_pretrained(model_dir)
    return chat_prompt_batch(tok, TEXTS, {"do_sample": False, "temperature": 1.0}, n=2)


def drain(w, prompts, tokens=2):
    got = {}
    while w._wave is not None:
        rows, out = w.step_wave(tokens, 2)
        assert len(rows) % 2 == 0 and all(rows[i + 1] == rows[i] + 1 for i in range(0, len(rows), 2))
        for i, r in enumerate(rows):
            got[r] = {k: v[i] for k, v in out.batch.items()}
    assert sorted(got) == list(range(len(prompts)))
    return got


def test_waves_stream_whole_groups_and_a_transfer_reaches_the_rollout_copy(model_dir):
    trainer, rollout = worker(model_dir, "actor_rollout"), worker(model_dir, "rollout")
    assert rollout.stepwise and rollout.rollout.module is not trainer.actor_module
    prompts = greedy_prompts(model_dir)
    assert rollout.start_wave(prompts) == len(prompts)
    before = drain(rollout, prompts)
    ref = trainer.generate_sequences(prompts)  # the trainer's own model, same weights so far
    for r, row in before.items():
        n = int(row["response_mask"].sum())
        assert torch.equal(row["responses"][:n], ref.batch["responses"][r][:n])
        assert (row["token_segments"][:n] == 0).all()

    # one update on the trainer: its greedy answers change; the rollout copy still has the old weights
    gen = trainer.generate_sequences(
        chat_prompt_batch(
            AutoTokenizer.from_pretrained(model_dir), TEXTS, {"do_sample": True, "temperature": 1.0}, n=2
        )
    )
    gen.meta_info["temperature"] = 1.0
    batch = gen.union(trainer.compute_log_prob(gen))
    batch.batch["advantages"] = (
        torch.randn(len(batch), 1).expand_as(batch.batch["response_mask"]) * batch.batch["response_mask"]
    )
    trainer.update_actor(batch)
    new_ref = trainer.generate_sequences(prompts).batch["responses"]

    # a wave paused after 2 tokens, the new weights loaded, resumed: its later tokens are the new model's
    rollout.start_wave(prompts)
    rollout.step_wave(2, 2)
    rollout.pause_wave()
    assert (
        receive_into(rollout.actor_engine.module, buckets_of(trainer.actor_engine.full_state_dict(), 1)) > 0
    )
    rollout.resume_wave()
    mixed = drain(rollout, prompts)
    seg = torch.stack([mixed[r]["token_segments"][:2] for r in sorted(mixed)])
    assert (seg[seg >= 0] == 0).all()
    later = [mixed[r]["token_segments"][2:][mixed[r]["response_mask"][2:].bool()] for r in sorted(mixed)]
    assert all((t == 1).all() for t in later) and any(len(t) for t in later)
    rollout.start_wave(prompts)
    after = drain(rollout, prompts)  # a whole wave on the new weights: the trainer's greedy answers
    for r, row in after.items():
        n = int(row["response_mask"].sum())
        assert torch.equal(row["responses"][:n], new_ref[r][:n])
    assert any(not torch.equal(before[r]["responses"], after[r]["responses"]) for r in after)  # it did change


def test_a_non_resumable_engine_generates_the_wave_at_once(model_dir):
    rollout = worker(model_dir, "rollout", "actor_rollout_ref.rollout.name=hf")
    assert not rollout.stepwise and not rollout.can_pause()
    prompts = greedy_prompts(model_dir)
    rollout.start_wave(prompts)
    rows, out = rollout.step_wave(1, 2)  # everything is there after the first step
    assert rows == list(range(len(prompts))) and rollout._wave is None
    mask = out.batch["response_mask"].bool()
    assert (out.batch["token_segments"][mask] == 0).all() and (out.batch["token_segments"][~mask] == -1).all()


def test_a_broadcast_received_in_the_background_while_a_wave_decodes(model_dir):
    """``overlap_weight_sync`` on the native engine: the rollout copy receives the trainer's broadcast in a
    thread while its wave keeps decoding, and loads it at the next safe point (here: after a pause)."""
    import threading
    import time

    trainer, rollout = worker(model_dir, "actor_rollout"), worker(model_dir, "rollout")
    host, port = trainer.host_sync_group(2)
    t = threading.Thread(target=lambda: trainer.join_sync_group(host, port, 0, 2))
    t.start()
    rollout.join_sync_group(host, port, 1, 2)
    t.join()
    with torch.no_grad():  # the trainer's weights move away from the rollout copy's
        for p in trainer.actor_module.parameters():
            p.add_(0.01)
    before = {k: v.clone() for k, v in rollout.actor_engine.module.state_dict().items()}
    prompts = greedy_prompts(model_dir)
    rollout.start_wave(prompts)
    rollout.start_receive()
    rollout.step_wave(2, 2)  # decoding goes on while the receive thread waits for the broadcast
    assert trainer.send_weights() > 0  # returns once the rollout side received every bucket
    rollout.step_wave(1, 2)
    deadline = time.time() + 120
    while not rollout._background.done:  # the thread ends right after the last bucket
        assert time.time() < deadline
        time.sleep(0.01)
    # received, not loaded yet: the wave still decodes the old weights
    assert all(torch.equal(v, before[k]) for k, v in rollout.actor_engine.module.state_dict().items())
    rollout.pause_wave()
    assert rollout.finish_receive() > 0
    rollout.resume_wave()
    want = trainer.actor_engine.full_state_dict()
    got = rollout.actor_engine.module.state_dict()
    assert all(torch.equal(got[k], v) for k, v in want.items())
    drain(rollout, prompts)
