"""RLHFDataset on good and malformed parquet/jsonl files, truncation modes, filtering and collate_fn."""

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from verl.utils.dataset import DatasetRowError, RLHFDataset, collate_fn, create_rl_dataset


def _row(content, gt="7", source="arithmetic", **extra):
    row = {
        "data_source": source,
        "prompt": [{"role": "user", "content": content}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": gt},
        "extra_info": {"split": "train", "index": extra.pop("index", 0)},
    }
    row.update(extra)
    return row


def _write_parquet(path, rows):
    pq.write_table(pa.Table.from_pylist(rows), path)
    return str(path)


def _write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


@pytest.fixture
def expected_ids(char_tokenizer, render_chat):
    return lambda messages: [char_tokenizer.vocab_map[c] for c in render_chat(messages)]


def test_items_are_left_padded_with_positions(tmp_path, char_tokenizer, expected_ids):
    rows = [_row("3+4=", index=10), _row("12+30=", gt="42", index=11)]
    f = _write_parquet(tmp_path / "a.parquet", rows)
    ds = RLHFDataset(f, char_tokenizer, config={"max_prompt_length": 20})
    assert len(ds) == 2
    for i, row in enumerate(rows):
        item = ds[i]
        want = expected_ids(row["prompt"])  # "U: 3+4=\nA: " one id per char
        n_pad = 20 - len(want)
        assert item["input_ids"].tolist() == [char_tokenizer.pad_token_id] * n_pad + want
        assert item["attention_mask"].tolist() == [0] * n_pad + [1] * len(want)
        assert item["position_ids"].tolist() == [0] * n_pad + list(range(len(want)))
        assert item["input_ids"].dtype == torch.long
        assert item["raw_prompt"] == row["prompt"]
        assert item["reward_model"]["ground_truth"] == row["reward_model"]["ground_truth"]
        assert item["data_source"] == "arithmetic" and item["ability"] == "math"
        assert item["index"] == 10 + i
        assert "agent_name" not in item and "tools_kwargs" not in item


def test_parquet_and_jsonl_give_the_same_items_and_collate(tmp_path, char_tokenizer):
    # pyarrow's from_pylist takes its columns from the first row, so every row names agent_name
    rows = [_row(f"{i}+{i}=", gt=str(2 * i), index=i, agent_name=None) for i in range(5)]
    rows[1]["agent_name"] = "tool_agent"
    rows[1]["extra_info"]["tools_kwargs"] = {"calc": {"x": 1}}
    f1 = _write_parquet(tmp_path / "a.parquet", rows[:3])
    f2 = _write_jsonl(tmp_path / "b.jsonl", rows[3:])
    ds = RLHFDataset([f1, f2], char_tokenizer, config={"max_prompt_length": 16})
    assert len(ds) == 5
    batch = collate_fn([ds[i] for i in range(5)])
    assert batch["input_ids"].shape == (5, 16) and batch["attention_mask"].shape == (5, 16)
    for k in ("raw_prompt", "data_source", "reward_model", "extra_info", "ability", "index", "agent_name"):
        assert isinstance(batch[k], np.ndarray) and batch[k].dtype == object and batch[k].shape == (5,)
    assert batch["raw_prompt"][4] == rows[4]["prompt"]  # a list stays one element, not a 2-D array
    assert [r["ground_truth"] for r in batch["reward_model"]] == ["0", "2", "4", "6", "8"]
    assert list(batch["agent_name"]) == [None, "tool_agent", None, None, None]
    assert batch["tools_kwargs"][1] == {"calc": {"x": 1}}
    from verl import DataProto

    proto = DataProto.from_single_dict(batch)
    assert len(proto) == 5
    assert proto.non_tensor_batch["data_source"][0] == "arithmetic"
    assert torch.equal(proto.batch["input_ids"], batch["input_ids"])


LONG = "abcdefghijklmnopqrstuvwxyz0123456789"


@pytest.mark.parametrize("mode", ["left", "right", "middle"])
def test_truncation_modes(tmp_path, char_tokenizer, expected_ids, mode):
    f = _write_jsonl(tmp_path / "long.jsonl", [_row(LONG)])
    ds = RLHFDataset(f, char_tokenizer, config={"max_prompt_length": 11, "truncation": mode})
    full = expected_ids([{"role": "user", "content": LONG}])
    assert len(full) == len("U: ") + len(LONG) + len("\nA: ")
    want = {"left": full[-11:], "right": full[:11], "middle": full[:5] + full[-6:]}[mode]
    item = ds[0]
    assert item["input_ids"].tolist() == want
    assert item["attention_mask"].tolist() == [1] * 11


def test_truncation_error_names_file_row_and_lengths(tmp_path, char_tokenizer):
    f = _write_jsonl(tmp_path / "long.jsonl", [_row("1+1="), _row(LONG)])
    ds = RLHFDataset(f, char_tokenizer, config={"max_prompt_length": 11})
    ds[0]
    with pytest.raises(
        ValueError, match=r"long\.jsonl: line 2: prompt is 43 tokens, longer than data\.max_prompt_length=11"
    ):
        ds[1]


def test_filter_overlong_prompts(tmp_path, char_tokenizer):
    rows = [_row("1+1=", index=0), _row(LONG, index=1), _row("2+2=", index=2)]
    f = _write_parquet(tmp_path / "a.parquet", rows)
    ds = RLHFDataset(f, char_tokenizer, config={"max_prompt_length": 16, "filter_overlong_prompts": True})
    assert len(ds) == 2
    assert [ds[i]["index"] for i in range(2)] == [0, 2]


def test_works_with_a_read_only_data_config(tmp_path, char_tokenizer):
    from verl.trainer.config import load_config

    cfg = load_config(["data.max_prompt_length=12", "data.train_max_samples=2"])
    f = _write_parquet(tmp_path / "a.parquet", [_row(f"{i}+1=", index=i) for i in range(4)])
    from omegaconf import OmegaConf

    OmegaConf.set_readonly(cfg, True)
    ds = create_rl_dataset(f, cfg.data, char_tokenizer, is_train=True)
    assert len(ds) == 2 and ds[1]["input_ids"].shape == (12,)


@pytest.mark.parametrize(
    "bad_row, field",
    [
        (
            {"prompt": [{"role": "user", "content": "x"}], "reward_model": {"ground_truth": "1"}},
            "'data_source'",
        ),
        ({"data_source": "a", "reward_model": {"ground_truth": "1"}}, "'prompt' is missing"),
        (
            {"data_source": "a", "prompt": "just text", "reward_model": {"ground_truth": "1"}},
            "'prompt' must be a non-empty list",
        ),
        (
            {"data_source": "a", "prompt": [{"content": "x"}], "reward_model": {"ground_truth": "1"}},
            "'prompt[0]'",
        ),
        (
            {
                "data_source": "a",
                "prompt": [{"role": "user", "content": "x"}],
                "reward_model": {"style": "rule"},
            },
            "'reward_model.ground_truth' is missing",
        ),
        ({"data_source": "a", "prompt": [{"role": "user", "content": "x"}]}, "'reward_model' must be a dict"),
        (
            {
                "data_source": "a",
                "prompt": [{"role": "user", "content": "x"}],
                "reward_model": {"ground_truth": "1"},
                "extra_info": "no",
            },
            "'extra_info' must be a dict",
        ),
    ],
)
def test_malformed_jsonl_row_names_file_line_and_field(tmp_path, char_tokenizer, bad_row, field):
    f = _write_jsonl(tmp_path / "bad.jsonl", [_row("1+1="), _row("2+2="), bad_row])
    with pytest.raises(DatasetRowError) as ei:
        RLHFDataset(f, char_tokenizer, config={"max_prompt_length": 16})
    msg = str(ei.value)
    assert f"{f}: line 3: " in msg
    assert field in msg


def test_malformed_parquet_row_and_bad_json(tmp_path, char_tokenizer):
    rows = [_row("1+1="), _row("2+2=")]
    rows[1] = {**rows[1], "data_source": None}
    f = _write_parquet(tmp_path / "bad.parquet", rows)
    with pytest.raises(DatasetRowError, match=r"bad\.parquet: row 1: field 'data_source' must be a string"):
        RLHFDataset(f, char_tokenizer, config={"max_prompt_length": 16})
    g = tmp_path / "broken.jsonl"
    g.write_text(json.dumps(_row("1+1=")) + "\n{not json\n")
    with pytest.raises(DatasetRowError, match=r"broken\.jsonl: line 2: not valid JSON"):
        RLHFDataset(str(g), char_tokenizer, config={"max_prompt_length": 16})
    with pytest.raises(FileNotFoundError, match="nothere.parquet"):
        RLHFDataset(str(tmp_path / "nothere.parquet"), char_tokenizer)
