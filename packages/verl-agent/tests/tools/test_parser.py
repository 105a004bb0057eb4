from verl.agent.tools.parser import format_tool_call, parse_tool_calls, truncate_text


def test_parses_calls_and_content():
    text = (
        'Let me add.<tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}</tool_call>'
        + format_tool_call("mul", {"x": [1, 2]})
    )
    turn = parse_tool_calls(text)
    assert turn.content == "Let me add."
    assert [(c.name, c.arguments) for c in turn.calls] == [("add", {"a": 2, "b": 3}), ("mul", {"x": [1, 2]})]
    assert turn.errors == []


def test_arguments_as_json_string():
    turn = parse_tool_calls('<tool_call>{"name": "f", "arguments": "{\\"q\\": 1}"}</tool_call>')
    assert [(c.name, c.arguments) for c in turn.calls] == [("f", {"q": 1})]


def test_malformed_calls_become_errors_not_exceptions():
    turn = parse_tool_calls(
        "<tool_call>{not json}</tool_call>"
        '<tool_call>{"arguments": {}}</tool_call>'
        '<tool_call>{"name": "f", "arguments": [1]}</tool_call>'
        '<tool_call>{"name": "ok", "arguments": {}}</tool_call>'
        'tail <tool_call>{"name": "g"'
    )
    assert [c.name for c in turn.calls] == ["ok"]
    assert len(turn.errors) == 4
    assert "not valid JSON" in turn.errors[0]
    assert '"name"' in turn.errors[1]
    assert "must be a JSON object" in turn.errors[2]
    assert "never closed" in turn.errors[3]
    assert turn.content == "tail"


def test_no_call():
    turn = parse_tool_calls("The answer is 5.")
    assert not turn.has_tool_call and turn.content == "The answer is 5."


def test_truncate_sides():
    text = "abcdefghij"
    assert truncate_text(text, 20) == text
    assert truncate_text(text, 4, "left") == "abcd...(truncated)"
    assert truncate_text(text, 4, "right") == "(truncated)...ghij"
    assert truncate_text(text, 4, "middle") == "ab...(truncated)...ij"
