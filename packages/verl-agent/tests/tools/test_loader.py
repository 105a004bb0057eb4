import asyncio

import pytest
from verl.agent.interactions import Gsm8kInteraction, load_interactions
from verl.agent.tools import load_tools
from verl.agent.tools.code_interpreter import CodeInterpreterTool
from verl.agent.tools.search import SearchTool


def test_tools_from_yaml(tmp_path):
    cfg = tmp_path / "tools.yaml"
    cfg.write_text(
        """
tools:
  - class_name: search
    config: {documents: ["alpha beta", "gamma"]}
  - class_name: verl.agent.tools.code_interpreter.CodeInterpreterTool
    config: {timeout: 5}
    tool_schema:
      type: function
      function:
        name: python
        description: run python
        parameters: {type: object, properties: {code: {type: string}}, required: [code]}
"""
    )
    tools = load_tools(cfg)
    assert [type(t) for t in tools] == [SearchTool, CodeInterpreterTool]
    assert [t.name for t in tools] == ["search", "python"]
    assert tools[1].tool_schema.function.description == "run python"


def test_yaml_errors_name_the_entry(tmp_path):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("tools:\n  - class_name: verl.agent.tools.search.NoSuchTool\n")
    with pytest.raises(AttributeError, match=r"tools\[0\].*no attribute 'NoSuchTool'"):  # as upstream's getattr
        load_tools(cfg)
    cfg.write_text("tools:\n  - class_name: nope\n")
    with pytest.raises(KeyError, match="unknown tool 'nope'"):
        load_tools(cfg)


def test_code_interpreter_runs_in_the_sandbox():
    tool = CodeInterpreterTool({"timeout": 10})
    out, _, metrics = asyncio.run(tool.execute("i", {"code": "print(6 * 7)"}))
    assert out.text == "42" and metrics["ok"] == 1.0
    err, _, metrics = asyncio.run(tool.execute("i", {"code": "raise ValueError('boom')"}))
    assert "ValueError: boom" in err.text and "[error]" in err.text and metrics["ok"] == 0.0


def test_interactions_from_yaml(tmp_path):
    cfg = tmp_path / "inter.yaml"
    cfg.write_text("interaction:\n  - name: tutor\n    class_name: gsm8k\n    config: {}\n")
    inter = load_interactions(cfg)
    assert list(inter) == ["tutor"] and isinstance(inter["tutor"], Gsm8kInteraction)
