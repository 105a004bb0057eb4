"""The driver-side tensor work of distillation, against layouts written out by hand: the privileged teacher
input, GKD's target rows (lmbda), and the routing of rows to teachers."""

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from verl.protocol import DataProto
from verl.trainer.distillation.gkd import mix_in_targets
from verl.trainer.distillation.privileged_context import context_texts, privileged_inputs
from verl.trainer.distillation.teacher_step import route

PAD = 0


def test_privileged_inputs_after_and_before_the_prompt():
    prompts = torch.tensor([[0, 0, 5, 6], [7, 8, 9, 10]])
    prompt_mask = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]])
    responses = torch.tensor([[11, 12, 0], [13, 0, 0]])
    resp_attn = torch.tensor([[1, 1, 0], [1, 0, 0]])
    out = privileged_inputs(prompts, prompt_mask, responses, resp_attn, [[20], [21, 22]], "after_prompt", PAD)
    # row 0: prompt 5 6, context 20 -> 3 tokens left-padded to the longest joined prompt (row 1: 6 tokens)
    assert out["input_ids"].tolist() == [[0, 0, 0, 5, 6, 20, 11, 12, 0], [7, 8, 9, 10, 21, 22, 13, 0, 0]]
    assert out["attention_mask"].tolist() == [[0, 0, 0, 1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1, 1, 0, 0]]
    assert out["position_ids"].tolist() == [[0, 0, 0, 0, 1, 2, 3, 4, 4], [0, 1, 2, 3, 4, 5, 6, 6, 6]]
    assert out["responses"] is responses
    out = privileged_inputs(prompts, prompt_mask, responses, resp_attn, [[20], [21, 22]], "before_prompt", PAD)
    assert out["input_ids"][:, :6].tolist() == [[0, 0, 0, 20, 5, 6], [21, 22, 7, 8, 9, 10]]
    with pytest.raises(ValueError, match="position='middle'"):
        privileged_inputs(prompts, prompt_mask, responses, resp_attn, [[20], [21]], "middle", PAD)


def test_context_texts_from_a_dotted_field():
    rows = np.array([{"ground_truth": "19", "style": "rule"}, {"ground_truth": np.array("7")}], dtype=object)
    texts = context_texts({"reward_model": rows}, "reward_model.ground_truth", "answer {solution}!")
    assert texts == ["answer 19!", "answer 7!"]
    with pytest.raises(KeyError, match="no 'solution' in the row"):
        context_texts({"reward_model": rows}, "reward_model.solution", "{solution}")
    with pytest.raises(KeyError, match="no column 'extra_info'"):
        context_texts({"reward_model": rows}, "extra_info.answer", "{solution}")


class CharTokenizer:
    """Digits are ids 10..19, EOS 1, pad 0 (enough to write the expected rows by hand)."""

    eos_token_id, pad_token_id = 1, 0

    def encode(self, text, add_special_tokens=False):
        return [10 + int(c) for c in text]


def _generated():
    # 4 rows, prompt width 2 (left padded), responses of width 2 (right padded)
    prompts = torch.tensor([[0, 5], [6, 7], [0, 8], [9, 9]])
    responses = torch.tensor([[12, 1], [13, 0], [14, 1], [15, 0]])
    resp_mask = torch.tensor([[1, 1], [1, 0], [1, 1], [1, 0]])
    attn = torch.cat([(prompts != 0).long(), resp_mask], 1)
    pos = torch.tensor([[0, 0, 1, 2], [0, 1, 2, 3], [0, 0, 1, 2], [0, 1, 2, 3]])
    batch = DataProto.from_dict(
        tensors={"prompts": prompts, "responses": responses, "response_mask": resp_mask,
                 "input_ids": torch.cat([prompts, responses], 1), "attention_mask": attn, "position_ids": pos},
        non_tensors={"reward_model": np.array([{"ground_truth": g} for g in ("3", "42", "5", "6")], dtype=object)},
        meta_info={"global_steps": 3},
    )
    return batch


def _config(lmbda, seed=1):
    return OmegaConf.create({"distillation": {"distillation_loss": {"lmbda": lmbda}},
                             "actor_rollout_ref": {"rollout": {"response_length": 4}}, "trainer": {"seed": seed}})


def test_gkd_replaces_the_drawn_rows_by_their_targets():
    lmbda, seed, step = 0.5, 7, 3
    off = np.flatnonzero(np.random.default_rng([seed, step]).random(4) >= lmbda)  # the draw the trainer makes
    assert 1 in off and len(off) < 4, "a seed whose draw replaces row 1 ('42') and keeps another row"
    metrics = {}
    out = mix_in_targets(_generated(), CharTokenizer(), _config(lmbda, seed), metrics)
    before = _generated().batch
    # "42" + EOS is 3 tokens: the response width grows from 2 to 3 for everyone
    want = {0: [13, 1, 0], 1: [14, 12, 1], 2: [15, 1, 0], 3: [16, 1, 0]}
    for i in range(4):
        if i in off:
            assert out.batch["responses"][i].tolist() == want[i]
            n = len([t for t in want[i] if t != 0])
            assert out.batch["response_mask"][i].tolist() == [1] * n + [0] * (3 - n)
        else:  # kept: the sample, padded one column
            assert out.batch["responses"][i].tolist() == before["responses"][i].tolist() + [0]
            assert out.batch["response_mask"][i].tolist() == before["response_mask"][i].tolist() + [0]
        assert out.batch["input_ids"][i].tolist() == before["prompts"][i].tolist() + out.batch["responses"][i].tolist()
        # positions continue from the prompt's last one
        last = int(before["position_ids"][i, 1])
        assert out.batch["position_ids"][i, 2:].tolist() == [last + 1, last + 2, last + 3]
        assert out.batch["attention_mask"][i, 2:].tolist() == out.batch["response_mask"][i].tolist()
    assert metrics["distillation/on_policy_fraction"] == 1 - len(off) / 4
    unchanged = mix_in_targets(_generated(), CharTokenizer(), _config(1.0), {})
    assert unchanged.batch["responses"].tolist() == before["responses"].tolist()


def test_gkd_refuses_per_token_tensors_it_cannot_rebuild():
    batch = _generated()
    batch.batch["rollout_log_probs"] = torch.zeros(4, 2)
    with pytest.raises(ValueError, match="rollout_log_probs"):
        mix_in_targets(batch, CharTokenizer(), _config(0.0), {})


def test_route_one_teacher_takes_every_row_several_by_key():
    batch = DataProto.from_dict(tensors={"x": torch.zeros(5)},
                                non_tensors={"data_source": np.array(["a", "b", "a", "c", "b"], dtype=object)})
    assert route(batch, ["default"], "data_source")["default"].tolist() == [0, 1, 2, 3, 4]
    routes = route(batch, ["a", "b", "c"], "data_source")
    assert {k: v.tolist() for k, v in routes.items()} == {"a": [0, 2], "b": [1, 4], "c": [3]}
    with pytest.raises(KeyError, match=r"rows with data_source=\['c'\] have no teacher"):
        route(batch, ["a", "b"], "data_source")
    with pytest.raises(KeyError, match="teacher_key='task' is not a column"):
        route(batch, ["a", "b"], "task")
