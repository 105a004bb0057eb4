"""The tool-call formats chosen by ``multi_turn.format`` (upstream's names): Hermes and gpt-oss (Harmony)
parsed from hand-written turns, the tool loop following the configured one, unknown names refused."""

import asyncio

import pytest
from verl.agent.server import ScriptedLLMServer
from verl.agent.tool_agent import ToolAgentLoop
from verl.agent.tools import function_tool, get_function_tool, tool_call_format
from verl.registries import TOOL_CALL_FORMATS


@function_tool
def mul(a: int, b: int) -> int:
    """Multiply two integers.

    Args:
        a: first
        b: second
    """
    return a * b


GPT_OSS_CALL = '<|channel|>commentary to=functions.mul <|constrain|>json<|message|>{"a": 6, "b": 7}<|call|>'


def test_the_registry_holds_upstreams_names():
    assert TOOL_CALL_FORMATS.names() == ["gpt-oss", "hermes"]
    with pytest.raises(KeyError, match="unknown tool-call format 'pythonic'; known: gpt-oss, hermes"):
        tool_call_format("pythonic")


def test_hermes_round_trip():
    fmt = tool_call_format("hermes")
    text = "Let me multiply. " + fmt.format_call("mul", {"a": 6, "b": 7})
    turn = fmt.parse(text)
    assert turn.content == "Let me multiply." and [(c.name, c.arguments) for c in turn.calls] == [("mul", {"a": 6, "b": 7})]
    assert fmt.call_end == "</tool_call>" and not fmt.parse(GPT_OSS_CALL).has_tool_call  # not its format


def test_gpt_oss_calls_by_hand():
    fmt = tool_call_format("gpt-oss")
    # a call after the reasoning; the reasoning mentions a call that is not one; the prompt held <|start|>assistant
    text = (
        '<|channel|>analysis<|message|>I could call to=functions.mul <|message|>{"a": 1}<|call|> later<|end|>'
        '<|start|>assistant<|channel|>commentary to=functions.mul <|constrain|>json<|message|>{"a": 6, "b": 7}<|call|>'
    )
    turn = fmt.parse(text)
    assert [(c.name, c.arguments) for c in turn.calls] == [("mul", {"a": 6, "b": 7})] and not turn.errors
    assert turn.content == ""
    # the constrain marker is optional; the call's name may carry dots
    turn = fmt.parse('<|channel|>commentary to=functions.math.mul<|message|>{"a": 2, "b": 3}<|call|>')
    assert [(c.name, c.arguments) for c in turn.calls] == [("math.mul", {"a": 2, "b": 3})]
    # a final answer is content, not a call
    final = fmt.parse("<|channel|>final<|message|>42<|return|>")
    assert not final.has_tool_call and final.content == "<|channel|>final<|message|>42<|return|>"
    # malformed: arguments that are not JSON, a call never ended
    bad = fmt.parse('<|channel|>commentary to=functions.mul <|constrain|>json<|message|>{"a": 6,<|call|>')
    assert not bad.calls and bad.errors == ["Error: the arguments of tool call 'mul' are not valid JSON: '{\"a\": 6,'"]
    open_call = fmt.parse('Hmm <|channel|>commentary to=functions.mul <|constrain|>json<|message|>{"a": 6')
    assert open_call.errors == ["Error: a call to functions.<name> was opened but never ended with <|call|>"]
    assert open_call.content == "Hmm"
    assert fmt.parse(fmt.format_call("mul", {"a": 1, "b": 2})).calls[0].arguments == {"a": 1, "b": 2}


@pytest.mark.parametrize(("fmt", "works"), [("gpt-oss", True), ("hermes", False)])
def test_the_tool_loop_reads_the_configured_format(tokenizer, stop_ids, rollout_config, fmt, works):
    server = ScriptedLLMServer([GPT_OSS_CALL, "42"], stop_ids, tokenizer)
    cfg = rollout_config(response_length=400, multi_turn__format=fmt)
    out = asyncio.run(
        ToolAgentLoop(cfg, server, tokenizer, tools=[get_function_tool("mul")]).run(
            {"temperature": 1.0}, raw_prompt=[{"role": "user", "content": "6*7?"}]
        )
    )
    roles = [m["role"] for m in out.extra_fields["messages"]]
    if works:  # the call ran and the model answered after the tool's output
        assert roles == ["user", "assistant", "tool", "assistant"]
        assert out.extra_fields["messages"][2]["content"] == "42" and out.metrics["tool_calls"] == 1
    else:  # in Hermes the same text is no call: the turn ends the trajectory
        assert roles == ["user", "assistant"] and out.metrics["tool_calls"] == 0


def test_validation_refuses_an_unknown_format_naming_the_supported_ones():
    from verl.trainer.config import ConfigError, load_config, validate_config

    base = ["data.train_files=t.parquet", "actor_rollout_ref.model.path=m", "trainer.device=cpu"]
    with pytest.raises(ConfigError) as e:
        validate_config(load_config([*base, "actor_rollout_ref.rollout.multi_turn.format=pythonic"]))
    assert (
        "actor_rollout_ref.rollout.multi_turn.format='pythonic': unknown tool-call format 'pythonic'; "
        "known: gpt-oss, hermes" in str(e.value)
    )
    for ok in ("gpt-oss", "hermes"):
        cfg = load_config([*base, "actor_rollout_ref.rollout.multi_turn.enable=true", f"actor_rollout_ref.rollout.multi_turn.format={ok}"])
        try:
            validate_config(cfg)
        except ConfigError as err:
            assert "multi_turn.format" not in str(err)
