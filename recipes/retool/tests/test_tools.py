"""The code interpreter through verl-agent's tool agent: parsing, masking, the call and output caps, and
tools that time out or raise. The tool runs real programs in the local sandbox."""

import asyncio

import pytest
from verl.agent.server import ScriptedLLMServer
from verl.agent.tool_agent import ToolAgentLoop
from verl.agent.tools.parser import format_tool_call, parse_tool_calls
from verl_recipe_retool.tools import ReToolCodeInterpreter, prepare_code


def call(code: str) -> str:
    return format_tool_call("code_interpreter", {"code": code})


def run(rollout_config, tok, stop_ids, turns, tool=None, **overrides):
    tool = tool or ReToolCodeInterpreter({"sandbox": "local", "default_timeout": 5})
    loop = ToolAgentLoop(
        rollout_config(**overrides), ScriptedLLMServer(turns, stop_ids, tok), tok, tools=[tool]
    )
    return asyncio.run(loop.run({}, raw_prompt=[{"role": "user", "content": "Compute 59*63."}]))


def tool_messages(out):
    return [m["content"] for m in out.extra_fields["messages"] if m["role"] == "tool"]


@pytest.mark.parametrize(
    ("code", "program"),
    [
        ("print(59*63)", "print(59*63)"),
        ("59*63", "print(59*63)"),
        ("```python\nx = 59\nx*63\n```", "x = 59\nprint(x*63)"),
        ("x = 59; x*63", "x = 59; print(x*63)"),
        ("x = 59*63", "x = 59*63"),  # a statement is left alone
        ("x = 59\n(x *\n 63)  # done", "x = 59\nprint((x *\n 63))  # done"),
        ("print(1\n", "print(1"),  # a syntax error is the interpreter's to report
    ],
)
def test_prepare_code(code, program):
    assert prepare_code(code) == program


def test_tool_call_is_parsed_from_the_hermes_format():
    parsed = parse_tool_calls("let me compute " + call("print(59*63)"))
    assert [(c.name, c.arguments) for c in parsed.calls] == [("code_interpreter", {"code": "print(59*63)"})]
    broken = parse_tool_calls('<tool_call>{"name": "code_interpreter", "arguments": {"code": </tool_call>')
    assert not broken.calls and "not valid JSON" in broken.errors[0]


def test_tool_turn_carries_the_sandbox_output_and_is_masked(rollout_config, tok, stop_ids):
    out = run(rollout_config, tok, stop_ids, [call("59*63"), "#### 3717"], multi_turn__max_assistant_turns=3)
    assert tool_messages(out) == ["3717"]  # 59*63 = 3717, computed by the sandbox
    assert out.metrics["tool_calls"] == 1 and out.metrics["well_formed_tool_call"] == 1
    # The masked span is exactly the tool turn (with the template's glue), the rest is the model's.
    mask = out.response_mask
    first0, last0 = mask.index(0), len(mask) - 1 - mask[::-1].index(0)
    assert all(m == 0 for m in mask[first0 : last0 + 1]) and all(mask[:first0]) and all(mask[last0 + 1 :])
    ids = out.response_ids
    assert (
        tok.decode(ids[first0 : last0 + 1]) == "\n<|im_start|>tool\n3717<|im_end|>\n<|im_start|>assistant\n"
    )
    assert tok.decode(ids[:first0]) == call("59*63") + "<|im_end|>"
    assert tok.decode(ids[last0 + 1 :]) == "#### 3717<|im_end|>"


def test_call_cap_stops_a_model_that_keeps_calling(rollout_config, tok, stop_ids):
    out = run(rollout_config, tok, stop_ids, [call("print(1)")], multi_turn__max_assistant_turns=3)
    assert out.metrics["tool_calls"] == 2 and out.metrics["assistant_turns"] == 3
    assert out.extra_fields["stop_reason"] == "max_assistant_turns"
    assert tool_messages(out) == ["1", "1"]


def test_output_cap_truncates_with_a_marker(rollout_config, tok, stop_ids):
    code = "print('a' * 500 + 'b' * 500)"
    out = run(rollout_config, tok, stop_ids, [call(code), "#### 0"], multi_turn__max_tool_response_length=64)
    (text,) = tool_messages(out)
    assert text == "a" * 32 + "...(truncated)..." + "b" * 32


def test_timeout_is_an_error_text_and_the_rollout_goes_on(rollout_config, tok, stop_ids):
    tool = ReToolCodeInterpreter({"sandbox": "local", "default_timeout": 1})
    out = run(rollout_config, tok, stop_ids, [call("while True:\n    pass"), "#### 0"], tool=tool)
    (text,) = tool_messages(out)
    assert "[timeout]" in text
    assert out.extra_fields["stop_reason"] == "done" and out.metrics["assistant_turns"] == 2


def test_program_error_is_shown_to_the_model(rollout_config, tok, stop_ids):
    out = run(rollout_config, tok, stop_ids, [call("1/0"), "#### 0"])
    (text,) = tool_messages(out)
    assert "[error]" in text and "ZeroDivisionError" in text


def test_raising_tool_is_an_error_text_and_the_rollout_goes_on(rollout_config, tok, stop_ids):
    tool = ReToolCodeInterpreter({"sandbox": "local"})

    def broken(*args, **kwargs):
        raise ConnectionError("sandbox unreachable")

    tool.sandbox = type("Broken", (), {"run": staticmethod(broken)})()
    out = run(rollout_config, tok, stop_ids, [call("print(1)"), "#### 1"], tool=tool)
    (text,) = tool_messages(out)
    assert text == "Error: tool 'code_interpreter' failed: ConnectionError: sandbox unreachable"
    assert out.metrics["tool_call_errors"] == 1 and out.metrics["assistant_turns"] == 2


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"num_workers": 4}, "unknown config key(s) ['num_workers']"),
        ({"default_language": "cpp"}, "only 'python'"),
        ({"sandbox": "sandbox_fusion"}, "needs sandbox_fusion_url"),
        ({"sandbox": "local", "sandbox_fusion_url": "http://x"}, "drop one of them"),
        ({"sandbox": "docker"}, "known: local, sandbox_fusion"),
    ],
)
def test_bad_tool_config_is_refused(config, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        ReToolCodeInterpreter(config)


def test_sandbox_fusion_url_selects_the_fusion_client():
    from verl.rewards.sandbox.fusion import SandboxFusionSandbox

    tool = ReToolCodeInterpreter({"sandbox_fusion_url": "http://localhost:8080/run_code", "rate_limit": 3})
    assert isinstance(tool.sandbox, SandboxFusionSandbox)
    assert tool.sandbox.url == "http://localhost:8080/run_code" and tool.sandbox._slots._value == 3


def test_sandbox_fusion_config_runs_code_over_http(rollout_config, tok, stop_ids):
    """The SandboxFusion path end to end: the tool's client talks SandboxFusion's protocol to verl-rewards'
    compatible service (which runs the code in its own local sandbox)."""
    from verl.rewards.sandbox.fusion_server import FusionServer

    with FusionServer() as server:
        tool = ReToolCodeInterpreter({"sandbox_fusion_url": f"{server.url}/run_code", "default_timeout": 5})
        out = run(rollout_config, tok, stop_ids, [call("```python\n59*63\n```"), "#### 3717"], tool=tool)
    assert tool_messages(out) == ["3717"]
