"""SPIN's pairs: which rows are picked, how the dataset's target becomes a response row, the layout."""

import numpy as np
import pytest
import torch
from verl.protocol import DataProto
from verl.workers.rollout.base import generation_tensors
from verl_recipe_spin.pairs import field_value, pad_responses, reward_pairs, sft_pairs, target_token_ids


def _scored(scores: list[float], uids: list[str]) -> DataProto:
    n = len(scores)
    tls = torch.zeros(n, 2)
    tls[:, 1] = torch.tensor(scores)
    return DataProto.from_dict(
        tensors={
            "token_level_scores": tls,
            "response_mask": torch.ones(n, 2, dtype=torch.long),
            "responses": torch.arange(2 * n).reshape(n, 2),
        },
        non_tensors={"uid": np.array(uids, dtype=object), "row": np.arange(n)},
    )


def test_reward_pairs_take_the_best_and_the_worst_answer_of_each_prompt():
    batch = _scored([0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.5, 0.0], ["a"] * 3 + ["b"] * 3 + ["c"] * 3)
    pairs, metrics = reward_pairs(batch)
    # a: first best is row 1, last worst row 0; b: all tie -> first (3) and last (5), two different rows;
    # c: best row 7, last worst row 8
    assert pairs.non_tensor_batch["row"].tolist() == [1, 0, 3, 5, 7, 8]
    assert pairs.non_tensor_batch["uid"].tolist() == ["a", "a", "b", "b", "c", "c"]
    assert pairs.batch["responses"][:, 0].tolist() == [2, 0, 6, 10, 14, 16]
    assert metrics == pytest.approx({"spin/gen_score/mean": 5.5 / 9, "spin/preference_pairs": 2 / 3})
    with pytest.raises(ValueError, match="uid 'z' has one answer"):
        reward_pairs(_scored([1.0], ["z"]))


def test_field_value_follows_a_dotted_key():
    batch = DataProto.from_dict(
        tensors={"x": torch.zeros(2, 1)},
        non_tensors={
            "reward_model": np.array([{"ground_truth": "7"}, {"ground_truth": "12"}], dtype=object),
            "extra_info": np.array([{"answer": "3+4=7 #### 7"}, {}], dtype=object),
        },
    )
    assert field_value(batch, "reward_model.ground_truth", 1) == "12"
    assert field_value(batch, "extra_info.answer", 0) == "3+4=7 #### 7"
    with pytest.raises(KeyError, match=r"row 1's extra_info has no 'answer'"):
        field_value(batch, "extra_info.answer", 1)
    with pytest.raises(KeyError, match=r"no field 'solution'"):
        field_value(batch, "solution", 0)


@pytest.fixture(scope="module")
def char_tok():
    from verl.workers.tiny import build_char_tokenizer

    return build_char_tokenizer()


def test_target_tokens_are_the_assistant_turn_up_to_where_a_generation_stops(char_tok):
    im_end = char_tok.convert_tokens_to_ids("<|im_end|>")
    messages = [{"role": "user", "content": "2+3="}]
    # the template renders the reply as "5<|im_end|>\n"; a rollout stopping at <|im_end|> never holds the "\n"
    assert char_tok.decode(target_token_ids(char_tok, messages, "5", {1, im_end})) == "5<|im_end|>"
    assert char_tok.decode(target_token_ids(char_tok, messages, "5", {1})) == "5<|im_end|>\n"


def test_stop_tokens_are_the_rollouts(tmp_path, char_tok):
    import json

    from verl.workers.tiny import build_tiny_qwen2
    from verl_recipe_spin.pairs import stop_token_ids

    build_tiny_qwen2(tmp_path, size="xs")  # generation config: eos 1 (<|endoftext|>)
    assert stop_token_ids(str(tmp_path), char_tok) == {1}
    gen = json.loads((tmp_path / "generation_config.json").read_text())
    (tmp_path / "generation_config.json").write_text(
        json.dumps({**gen, "eos_token_id": [1, 3]})
    )  # as after SFT
    assert stop_token_ids(str(tmp_path), char_tok) == {1, 3}
    (tmp_path / "generation_config.json").unlink()  # derived from config.json, as transformers does
    assert stop_token_ids(str(tmp_path), char_tok) == {1}


def _generated() -> DataProto:
    """Two prompts (left-padded to 3) with a generated answer each (right-padded to 2)."""
    prompts = torch.tensor([[0, 11, 12], [13, 14, 15]])
    p_mask = torch.tensor([[0, 1, 1], [1, 1, 1]])
    responses = torch.tensor([[21, 0], [22, 23]])
    r_mask = torch.tensor([[1, 0], [1, 1]])
    pos = torch.tensor([[0, 0, 1, 2, 3], [0, 1, 2, 3, 4]])
    return DataProto.from_dict(
        tensors=generation_tensors(prompts, p_mask, responses, r_mask, pos, torch.full((2, 2), -1.0)),
        non_tensors={
            "uid": np.array(["u0", "u1"], dtype=object),
            "reward_model": np.array([{"ground_truth": "x"}, {"ground_truth": "y"}], dtype=object),
        },
        meta_info={"global_steps": 3},
    )


def test_sft_pairs_put_the_target_before_the_models_answer():
    out = sft_pairs(_generated(), targets=[[31, 32, 33], [34]], pad_token_id=0, max_length=8)
    b = out.batch
    # rows: target 0, answer 0, target 1, answer 1; responses padded to the longest (the 3-token target)
    assert b["responses"].tolist() == [[31, 32, 33], [21, 0, 0], [34, 0, 0], [22, 23, 0]]
    assert b["response_mask"].tolist() == [[1, 1, 1], [1, 0, 0], [1, 0, 0], [1, 1, 0]]
    assert b["prompts"].tolist() == [[0, 11, 12], [0, 11, 12], [13, 14, 15], [13, 14, 15]]
    assert b["input_ids"][0].tolist() == [0, 11, 12, 31, 32, 33]
    assert b["attention_mask"].tolist() == [
        [0, 1, 1, 1, 1, 1],
        [0, 1, 1, 1, 0, 0],
        [1, 1, 1, 1, 0, 0],
        [1, 1, 1, 1, 1, 0],
    ]
    # positions go on from the prompt's last one, through padding too (the rollout's convention)
    assert b["position_ids"].tolist() == [
        [0, 0, 1, 2, 3, 4],
        [0, 0, 1, 2, 3, 4],
        [0, 1, 2, 3, 4, 5],
        [0, 1, 2, 3, 4, 5],
    ]
    assert "rollout_log_probs" not in b.keys()  # a target was never sampled
    assert out.non_tensor_batch["uid"].tolist() == ["u0", "u0", "u1", "u1"]
    assert out.meta_info == {"global_steps": 3}
    # a target longer than the response budget is cut like a generation would be
    cut = sft_pairs(_generated(), targets=[[31, 32, 33], [34]], pad_token_id=0, max_length=2)
    assert cut.batch["responses"][0].tolist() == [31, 32]
    with pytest.raises(ValueError, match="1 targets for 2 generated rows"):
        sft_pairs(_generated(), targets=[[1]], pad_token_id=0, max_length=4)


def test_pad_responses_refuses_to_shrink():
    tensors = {k: v for k, v in _generated().batch.items()}
    assert pad_responses(tensors, 2, 0)["responses"].shape == (2, 2)
    with pytest.raises(ValueError, match="cannot pad responses of 2 tokens down to 1"):
        pad_responses(tensors, 1, 0)
