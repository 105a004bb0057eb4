"""AgentLoopManager: concurrent loops, the contract's tensors, the HF batching server on a tiny model."""

import asyncio
import re

import numpy as np
import pytest
import torch
from verl import DataProto
from verl.agent.manager import AgentLoopManager
from verl.agent.server import HFAsyncServer, ScriptedLLMServer
from verl.agent.tools import format_tool_call, function_tool, get_function_tool


@function_tool("plus")  # test_tool_agent registers "add": one name, one function
def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: the first number
        b: the second number
    """
    return a + b


def rows(questions, **extra):
    ntb = {"raw_prompt": np.array([[{"role": "user", "content": q}] for q in questions], dtype=object)}
    for k, v in extra.items():
        ntb[k] = np.array(v, dtype=object)
    return DataProto.from_dict(non_tensors=ntb, meta_info={"do_sample": True})


def arithmetic_agent(text: str) -> str:
    """Calls add on the question's numbers, then answers with the tool's result."""
    results = re.findall(r"<\|im_start\|>tool\n(\d+)<\|im_end\|>", text)
    if results:
        return f"#### {results[-1]}"
    a, b = re.findall(r"(\d+)\+(\d+)=", text)[-1]
    return format_tool_call("plus", {"a": int(a), "b": int(b)})


def test_concurrent_tool_loops_in_row_order(tokenizer, stop_ids, rollout_config):
    questions = [f"{a}+{b}=" for a, b in [(1, 2), (30, 4), (5, 60), (7, 8), (90, 9), (11, 12)]]
    server = ScriptedLLMServer(arithmetic_agent, stop_ids, tokenizer)
    cfg = rollout_config(response_length=300, agent__default_agent_loop="tool_agent", agent__num_workers=3,
                         calculate_log_probs="true")  # fmt: skip
    manager = AgentLoopManager(cfg, server, tokenizer, loop_kwargs={"tools": [get_function_tool("plus")]})
    out = manager.generate_sequences(rows(questions))
    assert server.max_in_flight == 3  # three loops waited on the model at once, never more

    n = len(questions)
    p, r = out.batch["prompts"].shape[1], out.batch["responses"].shape[1]
    assert out.batch["input_ids"].shape == (n, p + r)
    assert torch.equal(out.batch["input_ids"], torch.cat([out.batch["prompts"], out.batch["responses"]], 1))
    am = out.batch["attention_mask"]
    assert torch.equal(out.batch["position_ids"], (am.cumsum(-1) - 1).clamp(min=0))
    for i, q in enumerate(questions):
        a, b = map(int, q[:-1].split("+"))
        n_resp = int(am[i, p:].sum())
        text = tokenizer.decode(out.batch["responses"][i, :n_resp].tolist(), skip_special_tokens=False)
        call = format_tool_call("plus", {"a": a, "b": b})
        assert (
            text
            == f"{call}<|im_end|>\n<|im_start|>tool\n{a + b}<|im_end|>\n<|im_start|>assistant\n#### {a + b}<|im_end|>"
        )
        mask = out.batch["response_mask"][i, :n_resp].tolist()
        env = n_resp - (len(call) + 1) - (len(f"#### {a + b}") + 1)
        assert mask == [1] * (len(call) + 1) + [0] * env + [1] * (len(f"#### {a + b}") + 1)
        assert out.batch["response_mask"][i, n_resp:].sum() == 0 and am[i, p + n_resp :].sum() == 0
        lp = out.batch["rollout_log_probs"][i, :n_resp]
        assert torch.equal(lp, torch.where(torch.tensor(mask) == 1, -0.5, 0.0))
    assert out.non_tensor_batch["num_turns"].tolist() == [4] * n  # user, call, tool, answer
    assert np.isnan(out.non_tensor_batch["reward_score"]).all()
    assert out.meta_info["metrics"]["agent/has_tool_call"] == [1.0] * n
    assert out.meta_info["metrics"]["agent/num_turns"] == [4.0] * n
    # rollout.calculate_log_probs=false (the default): no sampling log-probs, as from the plain rollouts
    plain = AgentLoopManager(rollout_config(response_length=300, agent__default_agent_loop="tool_agent"), server,
                             tokenizer, loop_kwargs={"tools": [get_function_tool("plus")]})  # fmt: skip
    assert "rollout_log_probs" not in plain.generate_sequences(rows(questions[:2])).batch.keys()


def test_agent_name_picks_the_loop(tokenizer, stop_ids, rollout_config):
    server = ScriptedLLMServer(arithmetic_agent, stop_ids, tokenizer)
    manager = AgentLoopManager(
        rollout_config(response_length=300), server, tokenizer, loop_kwargs={"tools": [get_function_tool("plus")]}
    )
    out = manager.generate_sequences(rows(["1+2=", "3+4="], agent_name=["tool_agent", None]))
    # tool_agent runs two model turns; the default single_turn_agent stops after the call text.
    assert out.non_tensor_batch["num_turns"].tolist() == [4, 2]  # upstream counts the prompt too
    # the loops' extra fields reach the batch: tool_agent's conversation; None for the single-turn row
    messages = out.non_tensor_batch["messages"]
    assert [m["role"] for m in messages[0]] == ["user", "assistant", "tool", "assistant"]
    assert messages[0][-1]["content"] == "#### 3" and messages[1] is None
    with pytest.raises(KeyError, match="unknown agent loop 'nope'"):
        manager.generate_sequences(rows(["1+2="], agent_name=["nope"]))


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    from verl.workers.tiny import build_tiny_qwen2

    model = build_tiny_qwen2(tmp_path_factory.mktemp("tiny"), size="xs", seed=0)
    return model.eval()


def reference_log_probs(model, ids: list[int], start: int) -> torch.Tensor:
    """log p(ids[t] | ids[:t]) for t >= start from one plain forward pass (temperature 1)."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0].float()
    lp = torch.log_softmax(logits[:-1], -1).gather(-1, torch.tensor(ids[1:]).unsqueeze(-1)).squeeze(-1)
    return lp[start - 1 :]


def test_hf_server_batches_concurrent_requests(tokenizer, stop_ids, tiny_model):
    chat_prompts = [
        [{"role": "user", "content": q}] for q in ["1+1=", "what is 23+45?", "hi", "a longer question here"]
    ]
    prompts = [
        tokenizer.encode(tokenizer.apply_chat_template(m, tokenize=False, add_generation_prompt=True))
        for m in chat_prompts
    ]
    params = {"max_tokens": 12, "do_sample": False}

    async def together(server):
        return await asyncio.gather(*(server.generate(p, params, str(i)) for i, p in enumerate(prompts)))

    async def one_by_one(server):
        return [await server.generate(p, params, str(i)) for i, p in enumerate(prompts)]

    batched = HFAsyncServer(tiny_model, stop_ids, tokenizer.pad_token_id, batch_window_ms=200)
    outs = asyncio.run(together(batched))
    assert max(batched.batch_sizes) > 1
    single = HFAsyncServer(tiny_model, stop_ids, tokenizer.pad_token_id, batch_window_ms=0)
    alone = asyncio.run(one_by_one(single))
    assert single.batch_sizes == [1, 1, 1, 1]
    for p, o, a in zip(prompts, outs, alone):
        assert o.token_ids == a.token_ids
        assert len(o.token_ids) == 12 or o.token_ids[-1] in stop_ids
        assert o.stop_reason == ("stop" if o.token_ids[-1] in stop_ids else "length")
        ref = reference_log_probs(tiny_model, p + o.token_ids, len(p))
        assert torch.allclose(torch.tensor(o.log_probs), ref, atol=1e-4)


def test_seeded_requests_sample_the_same_tokens_in_any_batch(tokenizer, stop_ids, tiny_model):
    """A request's seed fixes its tokens whatever shares its batch and in whatever order."""
    prompts = [tokenizer.encode(t) for t in ["1+1=", "what is 23+45?", "hi", "a longer question here"]]

    def params(seed):
        return {"max_tokens": 12, "do_sample": True, "temperature": 1.0, "seed": seed}

    async def together(server, order):
        outs = await asyncio.gather(*(server.generate(prompts[i], params(100 + i), str(i)) for i in order))
        return {i: o.token_ids for i, o in zip(order, outs)}

    async def one_by_one(server):
        return {i: (await server.generate(p, params(100 + i), str(i))).token_ids for i, p in enumerate(prompts)}

    batched = HFAsyncServer(tiny_model, stop_ids, tokenizer.pad_token_id, batch_window_ms=200)
    a = asyncio.run(together(batched, [0, 1, 2, 3]))
    b = asyncio.run(together(batched, [3, 1, 0, 2]))
    single = HFAsyncServer(tiny_model, stop_ids, tokenizer.pad_token_id, batch_window_ms=0)
    c = asyncio.run(one_by_one(single))
    assert max(batched.batch_sizes) > 1 and single.batch_sizes == [1, 1, 1, 1]
    assert a == b == c
    other = asyncio.run(together(batched, [0]))  # seed 100 again: same; seed 7: (almost surely) not
    assert other[0] == a[0]
    seven = asyncio.run(single.generate(prompts[0], params(7), "x")).token_ids
    assert seven != a[0]


def test_row_seeds_depend_on_step_phase_and_row_only():
    from verl.agent.manager import row_seed

    seeds = {row_seed(42, s, v, i) for s in range(3) for v in (False, True) for i in range(4)}
    assert len(seeds) == 24 and row_seed(42, 1, False, 2) == row_seed(42, 1, False, 2)
    assert row_seed(43, 1, False, 2) != row_seed(42, 1, False, 2)


def test_manager_on_tiny_model_log_probs_match_a_forward_pass(
    tokenizer, stop_ids, tiny_model, rollout_config
):
    server = HFAsyncServer(tiny_model, stop_ids, tokenizer.pad_token_id)
    cfg = rollout_config(response_length=10, agent__default_agent_loop="tool_agent", agent__num_workers=4,
                         calculate_log_probs="true")  # fmt: skip
    manager = AgentLoopManager(cfg, server, tokenizer, loop_kwargs={"tools": [get_function_tool("plus")]})
    torch.manual_seed(0)
    out = manager.generate_sequences(rows(["1+2=", "30+4=", "hello", "5+60="]))
    am = out.batch["attention_mask"]
    for i in range(4):
        ids = out.batch["input_ids"][i][am[i] == 1].tolist()
        p_len = int(am[i, : out.batch["prompts"].shape[1]].sum())
        ref = reference_log_probs(tiny_model, ids, p_len)
        n_resp = len(ids) - p_len
        model_tok = out.batch["response_mask"][i, :n_resp] == 1
        got = out.batch["rollout_log_probs"][i, :n_resp]
        assert torch.allclose(got[model_tok], ref[model_tok], atol=1e-4)
    assert out.batch["responses"].shape[1] <= 10


def test_output_widths_are_the_configured_lengths_on_every_rank(tokenizer, rollout_config):
    """Data-parallel ranks run their loops independently; their outputs must still concatenate."""
    from verl.agent.agent_loop import AgentLoopOutput

    cfg = rollout_config(prompt_length=12, response_length=20)
    manager = AgentLoopManager(cfg, ScriptedLLMServer([], [tokenizer.eos_token_id]), tokenizer, pad_token_id=0)

    def out(p, r):
        return AgentLoopOutput(list(range(1, p + 1)), list(range(1, r + 1)), [1] * r, [0.0] * r, 1)

    rank0 = manager.to_dataproto([out(3, 5), out(7, 2)])
    rank1 = manager.to_dataproto([out(10, 17)])
    assert rank0.batch["prompts"].shape == (2, 12) and rank0.batch["responses"].shape == (2, 20)
    merged = DataProto.concat([rank0, rank1])
    assert merged.batch["input_ids"].shape == (3, 32)
    assert merged.batch["response_mask"][2].tolist() == [1] * 17 + [0] * 3
    assert merged.batch["prompts"][0].tolist() == [0] * 9 + [1, 2, 3]  # left-padded
    # A row longer than the configured length widens that batch instead of being cut.
    assert manager.to_dataproto([out(3, 25)]).batch["responses"].shape == (1, 25)


def test_agent_loop_config_path_selects_loops(tmp_path, monkeypatch, tokenizer, stop_ids, rollout_config):
    """Upstream's agent-loop YAML: a name, a _target_ class and constructor arguments."""
    (tmp_path / "my_loops.py").write_text(
        "from verl.agent.agent_loop import SingleTurnAgentLoop\n\n"
        "class PrefixLoop(SingleTurnAgentLoop):\n"
        "    def __init__(self, *a, prefix='', **kw):\n"
        "        super().__init__(*a, **kw)\n"
        "        self.prefix = prefix\n\n"
        "    async def run(self, sampling_params, **row):\n"
        "        row['raw_prompt'] = [{'role': 'user', 'content': self.prefix + row['raw_prompt'][0]['content']}]\n"
        "        return await super().run(sampling_params, **row)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    loops = tmp_path / "loops.yaml"
    loops.write_text("- name: shouty\n  _target_: my_loops.PrefixLoop\n  prefix: 'HEY '\n")
    server = ScriptedLLMServer(["ok"], stop_ids, tokenizer)
    cfg = rollout_config(response_length=20, agent__agent_loop_config_path=str(loops))
    manager = AgentLoopManager(cfg, server, tokenizer)
    manager.generate_sequences(rows(["a", "b"], agent_name=["shouty", "single_turn_agent"]))
    seen = sorted(tokenizer.decode(p) for p in server.prompts)
    assert any("HEY a" in s for s in seen) and any(s.endswith("b<|im_end|>\n<|im_start|>assistant\n") for s in seen)
    with pytest.raises(KeyError, match=r"in agent_loop_config_path: \['shouty'\]"):
        manager.loop("nope")
    loops.write_text("- name: broken\n")
    with pytest.raises(ValueError, match="'name' and '_target_'"):
        AgentLoopManager(cfg, server, tokenizer)


def test_a_request_needs_a_prompt_and_max_tokens():
    from verl.agent.server import check_request

    check_request([1, 2], {"max_tokens": 1}, "r0")
    with pytest.raises(ValueError, match=r"request r1: sampling_params needs max_tokens >= 1, got \{'max_tokens': 0\}"):
        check_request([1], {"max_tokens": 0}, "r1")
    with pytest.raises(ValueError, match="request r2: sampling_params needs max_tokens >= 1"):
        check_request([1], {}, "r2")
    with pytest.raises(ValueError, match="request r3: empty prompt"):
        check_request([], {"max_tokens": 4}, "r3")
