"""The tool loop against a scripted stand-in model: exact tokens, masks, limits, malformed calls."""

import asyncio

import pytest
from verl.agent.server import ScriptedLLMServer
from verl.agent.tool_agent import ToolAgentLoop
from verl.agent.tools import BaseTool, ToolResponse, format_tool_call, function_tool, get_function_tool

PROMPT = [{"role": "user", "content": "What is 2+3?"}]
CALL = format_tool_call(
    "add", {"a": 2, "b": 3}
)  # '<tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}</tool_call>'


@function_tool
def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: first
        b: second
    """
    return a + b


ADD = get_function_tool("add")


class Boom(BaseTool):
    default_schema = {"type": "function", "function": {"name": "boom", "description": "b", "parameters": {"type": "object", "properties": {}}}}

    async def execute(self, instance_id, parameters, **kwargs):
        raise RuntimeError("kaput")


def n_tokens(text: str) -> int:
    """Tokens of ``text`` under the char tokenizer, counted by hand: specials 1 each, chars 1 each."""
    for special in ("<|im_start|>", "<|im_end|>", "<|endoftext|>"):
        text = text.replace(special, "\x01")
    return len(text)


def run(loop, **row):
    return asyncio.run(loop.run({"temperature": 1.0, "do_sample": True}, raw_prompt=PROMPT, **row))


def test_tool_call_round_trip_masks_by_hand(tokenizer, stop_ids, rollout_config):
    server = ScriptedLLMServer([CALL, "#### 5"], stop_ids, tokenizer)
    loop = ToolAgentLoop(rollout_config(response_length=400), server, tokenizer, tools=[ADD])
    out = run(loop)

    prompt_text = "<|im_start|>user\nWhat is 2+3?<|im_end|>\n<|im_start|>assistant\n"
    env_text = "\n<|im_start|>tool\n5<|im_end|>\n<|im_start|>assistant\n"
    assert out.prompt_ids == tokenizer.encode(prompt_text, add_special_tokens=False)
    assert len(out.prompt_ids) == n_tokens(prompt_text)
    m1, e1, m2 = len(CALL) + 1, n_tokens(env_text), len("#### 5") + 1
    assert out.response_mask == [1] * m1 + [0] * e1 + [1] * m2
    assert out.response_logprobs == [-0.5] * m1 + [0.0] * e1 + [-0.5] * m2
    want_text = CALL + "<|im_end|>" + env_text + "#### 5<|im_end|>"
    assert tokenizer.decode(out.response_ids, skip_special_tokens=False) == want_text
    # The model's second turn saw the whole conversation so far, token for token.
    assert server.prompts[1] == out.prompt_ids + out.response_ids[: m1 + e1]
    assert out.num_turns == 4 and out.extra_fields["stop_reason"] == "done"
    assert out.metrics["tool_calls"] == 1 and out.metrics["has_tool_call"] == 1
    assert out.extra_fields["messages"][2] == {"role": "tool", "content": "5"}


def test_max_assistant_turns(tokenizer, stop_ids, rollout_config):
    server = ScriptedLLMServer([CALL], stop_ids, tokenizer)  # calls the tool forever
    cfg = rollout_config(response_length=1000, multi_turn__max_assistant_turns=3)
    out = run(ToolAgentLoop(cfg, server, tokenizer, tools=[ADD]))
    assert len(server.prompts) == 3
    assert out.extra_fields["stop_reason"] == "max_assistant_turns"
    assert out.metrics["turn_limit_reached"] == 1 and out.metrics["tool_calls"] == 2
    assert out.num_turns == 6  # the prompt + 3 assistant + 2 tool (upstream's count)
    assert out.response_mask[-1] == 1  # ends on the model's turn


def test_max_user_turns(tokenizer, stop_ids, rollout_config):
    server = ScriptedLLMServer([CALL], stop_ids, tokenizer)
    cfg = rollout_config(response_length=1000, multi_turn__max_user_turns=1)
    out = run(ToolAgentLoop(cfg, server, tokenizer, tools=[ADD]))
    assert len(server.prompts) == 2 and out.extra_fields["stop_reason"] == "max_user_turns"


def test_response_length_budget_stops_cleanly(tokenizer, stop_ids, rollout_config):
    server = ScriptedLLMServer([CALL], stop_ids, tokenizer)
    budget = len(CALL) + 1 + 30  # room for one call, not for the tool turn plus another call
    out = run(ToolAgentLoop(rollout_config(response_length=budget), server, tokenizer, tools=[ADD]))
    assert len(out.response_ids) <= budget
    assert out.extra_fields["stop_reason"] == "response_length"
    assert out.metrics["response_length_exceeded"] == 1
    # The second model turn was cut at the budget: it ends without a stop token.
    assert len(out.response_ids) == budget and out.response_ids[-1] not in stop_ids


def test_malformed_unknown_and_failing_calls_answered_with_errors(tokenizer, stop_ids, rollout_config):
    bad = '<tool_call>{"name": "add", "arguments": {"a": 2</tool_call>'
    unknown = format_tool_call("sub", {"a": 1})
    failing = format_tool_call("boom", {})
    wrong_args = format_tool_call("add", {"a": "two", "b": 3})
    server = ScriptedLLMServer([bad, unknown, failing, wrong_args, "done"], stop_ids, tokenizer)
    cfg = rollout_config(response_length=2000)
    out = run(ToolAgentLoop(cfg, server, tokenizer, tools=[ADD, Boom({})]))
    tool_msgs = [m["content"] for m in out.extra_fields["messages"] if m["role"] == "tool"]
    assert len(tool_msgs) == 4
    assert tool_msgs[0].startswith("Error: the tool call") and "not valid JSON" in tool_msgs[0]
    assert tool_msgs[1].startswith("Error: unknown tool 'sub'; available tools: ['add', 'boom']")
    assert tool_msgs[2] == "Error: tool 'boom' failed: RuntimeError: kaput"
    assert tool_msgs[3].startswith("Error: argument 'a'='two'")
    assert out.metrics["tool_call_errors"] == 4 and out.extra_fields["stop_reason"] == "done"


def test_parallel_calls_limit_and_truncation(tokenizer, stop_ids, rollout_config):
    @function_tool
    def long_text(n: int) -> str:
        """Make text.

        Args:
            n: how many characters
        """
        return "x" * n

    calls = format_tool_call("long_text", {"n": 50}) + format_tool_call("long_text", {"n": 3})
    server = ScriptedLLMServer([calls, "ok"], stop_ids, tokenizer)
    cfg = rollout_config(
        response_length=2000,
        multi_turn__max_parallel_calls=1,
        multi_turn__max_tool_response_length=10,
        multi_turn__tool_response_truncate_side="right",
    )
    out = run(ToolAgentLoop(cfg, server, tokenizer, tools=[get_function_tool("long_text")]))
    tool_msgs = [m["content"] for m in out.extra_fields["messages"] if m["role"] == "tool"]
    assert tool_msgs == [
        "(truncated)..." + "x" * 10,
        "Error: at most 1 tool call(s) run per turn; 1 were ignored",
    ]


def test_tools_kwargs_reach_create_and_reward(tokenizer, stop_ids, rollout_config):
    seen = {}

    class Judge(BaseTool):
        default_schema = {"type": "function", "function": {"name": "judge", "description": "j", "parameters": {"type": "object", "properties": {}}}}

        async def create(self, instance_id=None, **kwargs):
            seen["create"] = kwargs
            return await super().create(instance_id, **kwargs)

        async def execute(self, instance_id, parameters, **kwargs):
            return ToolResponse(text="noted"), 0.25, {}

        async def calc_reward(self, instance_id, **kwargs):
            return 1.0 if self._instance_dict[instance_id]["answer"] == "5" else 0.0

    server = ScriptedLLMServer([format_tool_call("judge", {}), "bye"], stop_ids, tokenizer)
    out = run(
        ToolAgentLoop(rollout_config(response_length=500), server, tokenizer, tools=[Judge({})]),
        tools_kwargs={"judge": {"create_kwargs": {"answer": "5"}}},
    )
    assert seen["create"] == {"answer": "5"}
    # The call's step reward at the end of the calling turn, the tool's final verdict at the last turn.
    call_end = len(format_tool_call("judge", {}))  # char tokenizer: one token per char, + the stop token - 1
    assert out.extra_fields["tool_rewards"] == [0.25, 1.0]
    last = max(i for i, m in enumerate(out.response_mask) if m)
    assert out.extra_fields["tool_reward_positions"] == [call_end, last]
    assert out.response_mask[call_end] == 1 and out.response_mask[call_end + 1] == 0
    assert out.metrics["step_reward"] == 1.25


def test_sanity_check_reports_a_mismatch(tokenizer, stop_ids, rollout_config):
    from verl.agent.tokenization import ChatTokens, TokenizationMismatch, check_trajectory

    chat = ChatTokens(tokenizer)
    messages = PROMPT + [{"role": "assistant", "content": "ab"}]
    good = chat.prompt_ids(PROMPT) + tokenizer.encode("ab", add_special_tokens=False) + [stop_ids[0]]
    assert check_trajectory(chat, messages, None, good, stop_ids) is None
    bad = list(good)
    bad[-2] = tokenizer.encode("c", add_special_tokens=False)[0]
    with pytest.raises(TokenizationMismatch) as err:
        check_trajectory(chat, messages, None, bad, stop_ids)
    msg = str(err.value)
    assert msg.startswith(f"first difference at token {len(good) - 2} ")
    assert "assistant\\nac'" in msg and "assistant\\nab<|im_end|>" in msg
    assert "first difference" in check_trajectory(chat, messages, None, bad, stop_ids, mode="warn")


class Hangs(BaseTool):
    default_schema = {"type": "function", "function": {"name": "hangs", "description": "h", "parameters": {"type": "object", "properties": {}}}}

    async def execute(self, instance_id, parameters, **kwargs):
        await asyncio.sleep(3600)


def test_a_hung_tool_times_out_as_an_error_the_model_sees(tokenizer, stop_ids, rollout_config):
    """multi_turn.tool_timeout: a tool that never answers costs that long, then is answered with an error
    (counted in tool_call_errors); the rollout goes on (found by the chaos suite: it waited forever)."""
    server = ScriptedLLMServer([format_tool_call("hangs", {}), CALL, "done"], stop_ids, tokenizer)
    cfg = rollout_config(response_length=2000, multi_turn__tool_timeout=0.2)
    out = run(ToolAgentLoop(cfg, server, tokenizer, tools=[ADD, Hangs({})]))
    tool_msgs = [m["content"] for m in out.extra_fields["messages"] if m["role"] == "tool"]
    assert tool_msgs == ["Error: tool 'hangs' did not answer within 0.2 s (multi_turn.tool_timeout)", "5"]
    assert out.metrics["tool_call_errors"] == 1 and out.extra_fields["stop_reason"] == "done"
    with pytest.raises(ValueError, match=r"multi_turn.tool_timeout=0.0 must be a positive"):
        ToolAgentLoop(rollout_config(multi_turn__tool_timeout=0), server, tokenizer, tools=[ADD])
