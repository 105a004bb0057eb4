"""Upstream's dataset step: the answer-format instruction on every prompt, raw AIME rows mapped, through the
real RLHFDataset reading real parquet files with the tiny tokenizer."""

import pytest
from verl.utils.dataset import write_parquet
from verl.utils.dataset.rl_dataset import create_rl_dataset
from verl_recipe_retool import task
from verl_recipe_retool.config import recipe_files
from verl_recipe_retool.dataset import ANSWER_FORMAT

INSTRUCTION = "\nThe answer format must be: \\boxed{'The final answer goes here.'}"  # upstream's text


def _dataset(files, tok, custom=True):
    config = {"max_prompt_length": 256, "truncation": "error"}
    if custom:
        config["custom_cls"] = {"path": recipe_files()["dataset"], "name": "ReToolDataset"}
    return create_rl_dataset(files, config, tok)


def test_the_instruction_is_upstreams():
    assert ANSWER_FORMAT == INSTRUCTION


def test_every_prompt_gets_the_instruction_and_the_tool_agent(tmp_path, tok):
    rows = task.make_rows(3, seed=0, digits=2)
    for r in rows:
        r.pop("agent_name")
    write_parquet(rows, tmp_path / "train.parquet")
    ds = _dataset(str(tmp_path / "train.parquet"), tok)
    for i, r in enumerate(rows):
        item = ds[i]
        a, b = r["extra_info"]["a"], r["extra_info"]["b"]
        assert item["raw_prompt"] == [{"role": "user", "content": f"Compute {a}*{b}.{INSTRUCTION}"}]
        assert item["agent_name"] == "tool_agent"
        ids = item["input_ids"][item["attention_mask"].bool()].tolist()
        assert tok.decode(ids).endswith(f"{INSTRUCTION}<|im_end|>\n<|im_start|>assistant\n")
    plain = _dataset(str(tmp_path / "train.parquet"), tok, custom=False)  # retool.answer_format=false
    assert plain[0]["raw_prompt"] == rows[0]["prompt"] and "agent_name" not in plain[0]


def test_raw_aime_files_are_mapped_to_rows(tmp_path, tok):
    f24 = write_parquet([{"ID": "2024-I-1", "Problem": "Find x.", "Answer": 204}], tmp_path / "Maxwell-Jia" / "AIME_2024" / "train.parquet")
    f25 = write_parquet([{"problem": "Find y.", "answer": "70"}], tmp_path / "yentinglin" / "aime_2025" / "train.parquet")
    ds = _dataset([str(f24), str(f25)], tok)
    first, second = ds[0], ds[1]
    assert first["data_source"] == "aime_2024" and second["data_source"] == "aime_2025"
    assert first["raw_prompt"] == [{"role": "user", "content": "Find x." + INSTRUCTION}]
    assert first["reward_model"] == {"ground_truth": "204"} and second["reward_model"] == {"ground_truth": "70"}
    assert first["agent_name"] == second["agent_name"] == "tool_agent" and first["ability"] == "MATH"


def test_a_raw_aime_file_without_its_columns_is_named(tmp_path, tok):
    bad = write_parquet([{"question": "Find x."}], tmp_path / "Maxwell-Jia" / "AIME_2024" / "bad.parquet")
    with pytest.raises(KeyError, match=r"bad.parquet.*'Problem' and 'Answer'.*missing \['Problem', 'Answer'\]"):
        _dataset(str(bad), tok)
