"""Garbage in: malformed dataset rows and misbehaving reward functions each give an error naming the
file/row/function, the bad value and what is valid (or, where asked for, a counted skip), never a silent
wrong reward. The data goes through the real loaders (parquet, jsonl; ``reward.custom_reward_function``)."""

import json

import numpy as np
import pytest
import torch

from .harness import REWARD_FILE, rl_args, run_inprocess

GOOD = {
    "data_source": "arithmetic",
    "prompt": [{"role": "user", "content": "1+2="}],
    "ability": "math",
    "reward_model": {"style": "rule", "ground_truth": "3"},
    "extra_info": {"index": 0},
}


def _dataset(tokenizer_dir, path, **data):
    from omegaconf import OmegaConf
    from transformers import AutoTokenizer
    from verl.utils.dataset.rl_dataset import create_rl_dataset

    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    return create_rl_dataset(str(path), OmegaConf.create({"max_prompt_length": 32, **data}), tok)


@pytest.mark.parametrize(
    "bad, error",
    [
        ({"prompt": None}, r"row 1: field 'prompt' must be a non-empty list of chat messages, got NoneType"),
        ({"prompt": "1+2="}, r"row 1: field 'prompt' must be a non-empty list of chat messages, got str"),
        (
            {"prompt": [{"role": "user", "content": "   "}]},
            r"row 1: field 'prompt' holds only empty messages",
        ),
        (
            {"prompt": [{"role": "user", "content": 7}]},
            r"row 1: field 'prompt\[0\].content' must be a string, got int",
        ),
        ({"data_source": 3}, r"row 1: field 'data_source' must be a string, got int"),
        ({"reward_model": {"style": "rule"}}, r"row 1: field 'reward_model.ground_truth' is missing"),
    ],
)
def test_malformed_jsonl_row_is_refused_naming_file_row_and_field(chaos_assets, tmp_path, bad, error):
    path = tmp_path / "train.jsonl"
    path.write_text(json.dumps(GOOD) + "\n" + json.dumps({**GOOD, **bad}) + "\n")
    with pytest.raises(ValueError, match=rf"{path}: line 2|{error}") as err:
        _dataset(chaos_assets["model"], path)
    assert str(path) in str(err.value)


def test_missing_prompt_and_non_utf8_in_parquet(chaos_assets, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    no_prompt = tmp_path / "no_prompt.parquet"
    pq.write_table(pa.Table.from_pylist([{k: v for k, v in GOOD.items() if k != "prompt"}]), no_prompt)
    with pytest.raises(
        ValueError, match=rf"{no_prompt}: row 0: field 'prompt' is missing \(a list of chat messages"
    ):
        _dataset(chaos_assets["model"], no_prompt)
    # bytes that are not UTF-8 where the text should be: a binary column, as a careless writer leaves it
    raw = tmp_path / "bytes.parquet"
    rows = [{**GOOD, "prompt": [{"role": "user", "content": b"\xff\xfe1+2="}]}]
    pq.write_table(pa.Table.from_pylist(rows), raw)
    with pytest.raises(
        ValueError, match=rf"{raw}: row 0: field 'prompt\[0\].content' must be a string, got bytes"
    ):
        _dataset(chaos_assets["model"], raw)


def test_overlong_prompt_is_an_error_or_a_counted_filter(chaos_assets, tmp_path, caplog):
    from verl.utils.dataset.rows import write_parquet

    long = {**GOOD, "prompt": [{"role": "user", "content": "9" * 200}]}
    path = write_parquet([GOOD, long], tmp_path / "train.parquet")
    ds = _dataset(chaos_assets["model"], path)
    with pytest.raises(
        ValueError, match=rf"{path}: row 1: prompt is \d+ tokens, longer than data.max_prompt_length=32"
    ):
        ds[1]
    with caplog.at_level("WARNING"):
        assert len(_dataset(chaos_assets["model"], path, filter_overlong_prompts=True)) == 1
    assert "filtered 1 of 2 prompts longer than max_prompt_length=32" in caplog.text


def _scored_batch(tokenizer_dir, responses):
    """A DataProto as the rollout leaves it (left-padded prompts, right-padded responses), real tokenizer."""
    from transformers import AutoTokenizer
    from verl import DataProto

    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    n, p, r = len(responses), 8, 8
    prompts = torch.full((n, p), tok.pad_token_id)
    resp = torch.full((n, r), tok.pad_token_id)
    mask = torch.zeros(n, p + r, dtype=torch.long)
    for i, text in enumerate(responses):
        ids = tok(text, add_special_tokens=False)["input_ids"]
        prompts[i, -2:] = torch.tensor(tok("1=", add_special_tokens=False)["input_ids"][:2])
        resp[i, : len(ids)] = torch.tensor(ids)
        mask[i, p - 2 : p + len(ids)] = 1
    return DataProto.from_dict(
        tensors={
            "prompts": prompts,
            "responses": resp,
            "input_ids": torch.cat([prompts, resp], 1),
            "attention_mask": mask,
            "response_mask": mask[:, p:].clone(),
        },
        non_tensors={
            "data_source": np.array(["arithmetic"] * n, dtype=object),
            "reward_model": np.array([{"ground_truth": "3"}] * n, dtype=object),
            "extra_info": np.array([{}] * n, dtype=object),
        },
    ), tok


def _manager(name, tok, **kwargs):
    from omegaconf import OmegaConf
    from verl.trainer.ppo.reward import load_reward_manager

    cfg = OmegaConf.create(
        {"reward": {"custom_reward_function": {"path": REWARD_FILE, "name": name}, "reward_kwargs": kwargs}}
    )
    return load_reward_manager(cfg, tok, num_examine=0)


@pytest.mark.parametrize(
    "name, error, match",
    [
        (
            "raises",
            RuntimeError,
            r"reward scorer raises \(.*shaped_reward.py\) failed on row 0 .*KeyError: 'answer'",
        ),
        (
            "returns_nan",
            ValueError,
            r"reward scorer returns_nan \(.*shaped_reward.py\) returned nan \(float\) for row 0"
            r".*a score must be a finite number",
        ),
        (
            "returns_string",
            ValueError,
            r"reward scorer returns_string \(.*\) returned '0.5' \(str\) for row 0",
        ),
        (
            "returns_dict_without_score",
            KeyError,
            r"returns_dict_without_score .*returned a dict without 'score'",
        ),
    ],
)
def test_misbehaving_reward_function_is_named(chaos_assets, name, error, match):
    batch, tok = _scored_batch(chaos_assets["model"], ["3", "4"])
    with pytest.raises(error, match=match):
        _manager(name, tok)(batch, return_dict=True)


def test_raising_reward_function_can_be_a_counted_zero(chaos_assets):
    batch, tok = _scored_batch(chaos_assets["model"], ["3", "4"])
    out = _manager("raises", tok, count_errors_as_zero=True)(batch, return_dict=True)
    assert out["reward_metrics"] == {"reward/score_errors": 2.0}
    assert out["reward_tensor"].abs().sum().item() == 0.0
    good = _manager("compute_score", tok)(batch, return_dict=True)["reward_tensor"].sum(-1)
    assert good.tolist() == [1.0, 0.5]  # the shaped reward: exact, then digits only


@pytest.mark.slow
def test_nan_reward_stops_the_trainer_at_step_1(chaos_assets, tmp_path, in_process_worker_env):
    """What the user sees in a run (local backend): the first step stops naming the scorer; no metrics row."""
    args = rl_args(
        chaos_assets["model"],
        chaos_assets["data"],
        tmp_path / "run",
        2,
        "reward.custom_reward_function.name=returns_nan",
        "trainer.worker_backend=local",
        workers=1,
    )
    with pytest.raises(ValueError, match=r"reward scorer returns_nan .* returned nan"):
        run_inprocess(args)
    assert (
        not (tmp_path / "run" / "metrics.jsonl").exists()
        or (tmp_path / "run" / "metrics.jsonl").read_text() == ""
    )
