"""The dataset processor on a hand-made export in the CollabLLM multiturn datasets' shape."""

import json

import pyarrow.parquet as pq
import pytest
from verl.utils.dataset.rows import check_row
from verl_recipe_collabllm.process_dataset import SYSTEM_PROMPT, main, rl_rows, sft_rows

Q = "What is the sum of the roots of x^2 - 5x + 6?"


def example(conv_id, turn_id, score, prompt, completion):
    return {
        "conv_id": conv_id,
        "turn_id": turn_id,
        "score": score,
        "prompt": prompt,
        "completion": completion,
        "single_turn_prompt": Q,
        "single_turn_completion": "The roots are 2 and 3, so the sum is \\boxed{5}.",
        "single_turn_metadata": {"level": 2},
    }


ASK = [{"role": "user", "content": "Help with a quadratic?"}]
TOLD = ASK + [{"role": "assistant", "content": "Which one?"}, {"role": "user", "content": "x^2 - 5x + 6"}]
EXAMPLES = [
    example(0, 0, 0.4, ASK, "Which one?"),
    example(0, 0, 0.2, ASK, "Sure, which equation?"),  # same prompt: kept once for RL
    example(0, 1, 0.9, TOLD, "The sum is \\boxed{5}."),
    example(1, 0, 0.5, [{"role": "user", "content": "Sum of roots of x^2-5x+6?"}], "\\boxed{5}"),
]


def test_rl_rows_follow_the_row_contract_and_carry_the_simulator_inputs():
    rows = rl_rows(EXAMPLES, "lighteval/MATH", "solving math problems")
    assert len(rows) == 3  # the duplicate prompt is dropped
    for i, row in enumerate(rows):
        check_row(row, f"row {i}")
        assert row["prompt"][0] == {"role": "system", "content": SYSTEM_PROMPT}
        assert row["agent_name"] == "collabllm_agent" and row["data_source"] == "lighteval/MATH"
        assert row["reward_model"]["ground_truth"].endswith("\\boxed{5}.")
        assert row["extra_info"]["interaction_kwargs"] == {
            "name": "collabllm",
            "single_turn_prompt": Q,
            "task_desc": "solving math problems",
        }
        assert (
            row["extra_info"]["single_turn_metadata"] == {"level": 2}
            and row["extra_info"]["prompt"] == row["prompt"]
        )
    assert rows[1]["prompt"][1:] == TOLD
    with pytest.raises(ValueError, match="needs 'prompt' and 'single_turn_prompt'"):
        rl_rows([{"prompt": ASK}], "lighteval/MATH", "t")


def test_sft_rows_take_each_conversations_last_best_turn():
    rows = sft_rows(EXAMPLES)
    assert len(rows) == 2
    assert rows[0]["messages"] == [{"role": "system", "content": SYSTEM_PROMPT}, *TOLD,
                                   {"role": "assistant", "content": "The sum is \\boxed{5}."}]  # fmt: skip
    assert rows[1]["messages"][-1] == {"role": "assistant", "content": "\\boxed{5}"}


def test_command_line_writes_the_splits(tmp_path):
    src = tmp_path / "export.jsonl"
    src.write_text("".join(json.dumps(e) + "\n" for e in EXAMPLES))
    paths = main(["--input", str(src), "--out_dir", str(tmp_path / "out"), "--validation_size", "1"])
    train, val = (pq.read_table(paths[k]).to_pylist() for k in ("train", "validation"))
    assert (len(train), len(val)) == (2, 1) and paths["train"].name == "rl_train.parquet"
    paths = main(
        [
            "--input",
            str(src),
            "--out_dir",
            str(tmp_path / "out"),
            "--dataset_type",
            "sft",
            "--validation_size",
            "1",
        ]
    )
    assert paths["validation"].name == "sft_validation.parquet"
    with pytest.raises(ValueError, match="validation_size=0.01 gives 0 of 3 rows"):
        main(["--input", str(src), "--out_dir", str(tmp_path / "x"), "--validation_size", "0.01"])
