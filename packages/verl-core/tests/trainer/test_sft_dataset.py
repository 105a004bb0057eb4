"""SFT data: assistant-only loss masks built incrementally from the chat template, file/row errors."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from verl.utils.dataset.rows import DatasetRowError
from verl.utils.dataset.sft_dataset import SFTDataset, sft_collate_fn, tokenize_conversation


class CharTokenizer:
    """One token per character (id = ord); a Qwen-like template: <role>content</> per message."""

    pad_token_id = 0
    eos_token_id = 1

    def __init__(self, rewrite_history: bool = False):
        self.rewrite_history = rewrite_history

    def apply_chat_template(self, messages, add_generation_prompt=False, tokenize=False, **_):
        assert tokenize is False
        parts = []
        for i, m in enumerate(messages):
            content = m["content"]
            if self.rewrite_history and m["role"] == "assistant" and i < len(messages) - 1:
                content = content[:1]  # like templates that drop earlier reasoning
            parts.append(f"<{m['role'][0]}>{content}|")
        if add_generation_prompt:
            parts.append("<a>")
        return "".join(parts)

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [ord(c) for c in text]}


def targets(ids, mask):
    return "".join(chr(i) for i, m in zip(ids, mask) if m)


def test_single_turn_mask_covers_reply_and_end_marker_only():
    msgs = [{"role": "user", "content": "1+2="}, {"role": "assistant", "content": "3"}]
    ids, mask = tokenize_conversation(CharTokenizer(), msgs)
    assert "".join(map(chr, ids)) == "<u>1+2=|<a>3|"
    # The header "<a>" is context; the reply and its end marker are targets.
    assert mask == [0] * 11 + [1, 1]


def test_multi_turn_with_system_masks_every_assistant_turn():
    msgs = [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "yo"},
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "ans"},
    ]
    ids, mask = tokenize_conversation(CharTokenizer(), msgs)
    assert "".join(map(chr, ids)) == "<s>S|<u>hi|<a>yo|<u>q|<a>ans|"
    assert targets(ids, mask) == "yo|ans|"
    assert len(ids) == len(mask)


def test_template_that_rewrites_history_is_rejected_with_row():
    msgs = [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "long"},
        {"role": "user", "content": "b"},
        {"role": "assistant", "content": "c"},
    ]
    with pytest.raises(DatasetRowError, match=r"f.jsonl: line 7: .*not prefix-stable at message 2"):
        tokenize_conversation(CharTokenizer(rewrite_history=True), msgs, where="f.jsonl: line 7")


def _write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_dataset_reads_parquet_and_jsonl_and_collates_right_padded(tmp_path):
    rows = [
        {"messages": [{"role": "user", "content": "1+1="}, {"role": "assistant", "content": "2"}]},
        {"messages": [{"role": "user", "content": "10+10="}, {"role": "assistant", "content": "20"}]},
    ]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "a.parquet")
    jl = _write_jsonl(tmp_path / "b.jsonl", rows[:1])
    ds = SFTDataset([str(tmp_path / "a.parquet"), jl], CharTokenizer(), {"max_length": 64})
    assert len(ds) == 3
    batch = sft_collate_fn([ds[0], ds[1]], pad_token_id=0)
    lengths = [len("<u>1+1=|<a>2|"), len("<u>10+10=|<a>20|")]
    assert batch["input_ids"].shape == (2, max(lengths))
    assert batch["attention_mask"].sum(-1).tolist() == lengths
    assert batch["input_ids"][0, lengths[0]:].tolist() == [0] * (lengths[1] - lengths[0])
    assert batch["loss_mask"].sum(-1).tolist() == [2, 3]
    assert torch.equal(batch["position_ids"][0], torch.arange(max(lengths)))


@pytest.mark.parametrize(
    ("row", "match"),
    [
        ({"prompt": []}, r"line 2: field 'messages' is missing"),
        ({"messages": [{"role": "user", "content": "x"}]}, r"line 2: .*no assistant message"),
        ({"messages": [{"role": "bot", "content": "x"}]}, r"line 2: field messages\[0\].role='bot'"),
        ({"messages": [{"role": "assistant", "content": 3}]}, r"line 2: field messages\[0\].content must be a string"),
    ],
)
def test_bad_rows_name_file_line_and_field(tmp_path, row, match):
    good = {"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]}
    path = _write_jsonl(tmp_path / "d.jsonl", [good, row])
    with pytest.raises(DatasetRowError, match=match) as e:
        SFTDataset(path, CharTokenizer())
    assert "d.jsonl" in str(e.value)


def test_truncation_error_left_right(tmp_path):
    row = {"messages": [{"role": "user", "content": "abcdefgh"}, {"role": "assistant", "content": "XY"}]}
    path = _write_jsonl(tmp_path / "t.jsonl", [row])
    with pytest.raises(DatasetRowError, match=r"t.jsonl: line 1: .*18 tokens, longer than data.max_length=8"):
        SFTDataset(path, CharTokenizer(), {"max_length": 8})
    left = SFTDataset(path, CharTokenizer(), {"max_length": 8, "truncation": "left"})[0]
    assert "".join(map(chr, left["input_ids"].tolist())) == "h|<a>XY|"
    assert left["loss_mask"].tolist() == [0, 0, 0, 0, 0, 1, 1, 1]
    # Cutting on the right leaves no assistant token: an error rather than a silent zero-loss row.
    with pytest.raises(DatasetRowError, match="no assistant token is left"):
        SFTDataset(path, CharTokenizer(), {"max_length": 8, "truncation": "right"})
