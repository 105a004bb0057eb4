"""Upstream's ReTool-SFT preprocessing of a local file in the dataset's format, and the cold start on it."""

import pytest
from verl.utils.dataset import write_parquet
from verl.utils.dataset.rows import read_rows
from verl_recipe_retool import sft_data
from verl_recipe_retool.sft_data import ReToolSFTFormatError, convert_row

SYSTEM = "Solve the problem with the help of a code interpreter.\n\n*user question:*\n"
ROW = {
    "messages": [
        {"role": "user", "content": SYSTEM + "What is 59*63? <answer>Put the answer here</answer>"},
        {
            "role": "assistant",
            "content": "Let me compute it.\n<code>\n```python\nprint(59*63)\n```\n</code>\n"
            "<interpreter>\n3717\n</interpreter>\nThe product is 3717. <answer>\\boxed{3717}</answer>",
        },
    ]
}


def test_a_row_becomes_upstreams_tool_calling_conversation():
    out = convert_row(ROW, tools=[{"type": "function"}])
    assert out["tools"] == [{"type": "function"}]
    assert out["messages"] == [
        {"role": "user", "content": "What is 59*63? Put the answer here"},
        {
            "role": "assistant",
            "content": "Let me compute it.",
            "tool_calls": [
                {"type": "function", "function": {"name": "code_interpreter", "arguments": {"code": "print(59*63)"}}}
            ],
        },
        {"role": "tool", "content": "3717"},
        {"role": "assistant", "content": "The product is 3717. \\boxed{3717}"},
    ]


def test_hermes_text_is_what_the_rollout_parses():
    from verl.agent.tools.parser import parse_tool_calls

    conv = sft_data.hermes_conversation(convert_row(ROW, tools=[]))
    parsed = parse_tool_calls(conv[1]["content"])
    assert parsed.content == "Let me compute it." and parsed.calls[0].arguments == {"code": "print(59*63)"}


@pytest.mark.parametrize(
    ("row", "match"),
    [
        ({"messages": [{"role": "user", "content": "no marker"}, {"role": "assistant", "content": "x"}]}, "user question"),
        ({"messages": [{"role": "user", "content": SYSTEM + "q"}, {"role": "assistant", "content": "<code>x"}]}, "not closed"),
        ({"text": "x"}, "columns: \\['text'\\]"),
    ],
)
def test_bad_rows_are_named(row, match):
    with pytest.raises(ReToolSFTFormatError, match=match):
        convert_row(row, tools=[], where="f.parquet: row 3")


def test_the_command_writes_upstreams_parquet(tmp_path):
    src = write_parquet([ROW, ROW], tmp_path / "retool_sft.parquet")
    sft_data.main([str(src), str(tmp_path / "out.parquet")])
    rows = [r for _, r in read_rows(tmp_path / "out.parquet")]
    assert len(rows) == 2 and rows[0]["tools"][0]["function"]["name"] == "code_interpreter"
    assert rows[0]["messages"][1]["tool_calls"][0]["function"]["arguments"] == {"code": "print(59*63)"}


def test_the_cold_start_trains_on_the_converted_conversations(tmp_path, tok):
    import torch
    from verl.workers.tiny import build_tiny_qwen2
    from verl_recipe_retool import cold_start

    src = write_parquet([ROW], tmp_path / "retool_sft.parquet")
    (trace,) = cold_start.traces_from_sft_data(str(src), tok)
    trained = tok.decode([i for i, m in zip(trace["ids"], trace["mask"]) if m])
    call = '<tool_call>{"name": "code_interpreter", "arguments": {"code": "print(59*63)"}}</tool_call>'
    # core's SFT tokenization trains each assistant message's whole rendering (its newline too)
    assert trained == f"Let me compute it.{call}<|im_end|>\nThe product is 3717. \\boxed{{3717}}<|im_end|>\n"
    model = build_tiny_qwen2(tmp_path / "m", size="xs", seed=0)
    first = cold_start.sft(model, [trace], steps=1, lr=0.0)
    assert cold_start.sft(model, [trace], steps=30) < 0.6 * first
    assert torch.isfinite(torch.tensor(first))
