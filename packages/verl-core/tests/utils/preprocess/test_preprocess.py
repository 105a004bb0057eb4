"""GSM8K / MATH converters on tiny local files: rows, answers, instruction text and error messages."""

import json
import subprocess
import sys

import pyarrow.parquet as pq
import pytest
from verl.utils.preprocess import gsm8k, math_dataset


def _jsonl(path, *rows):
    """``path`` holding one JSON object a line."""
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_gsm8k_cli_converts_jsonl(tmp_path):
    src = _jsonl(
        tmp_path / "test.jsonl",
        {"question": "Tom has 3 apples and buys 4. How many?", "answer": "3+4=<<3+4=7>>7\n#### 7"},
        {"question": "A big sum?", "answer": "It is large.\n#### 1,234"},
    )
    out = tmp_path / "out"
    subprocess.run(
        [sys.executable, "-m", "verl.utils.preprocess.gsm8k", "--input", str(src), "--output_dir", str(out)],
        check=True,
        capture_output=True,
    )
    rows = pq.read_table(out / "test.parquet").to_pylist()
    assert len(rows) == 2
    assert rows[0]["data_source"] == "openai/gsm8k"
    assert rows[0]["prompt"] == [
        {
            "role": "user",
            "content": 'Tom has 3 apples and buys 4. How many? Let\'s think step by step and output the final answer after "####".',
        }
    ]
    assert rows[0]["reward_model"] == {"style": "rule", "ground_truth": "7"}
    assert rows[1]["reward_model"]["ground_truth"] == "1234"
    assert rows[1]["extra_info"]["split"] == "test" and rows[1]["extra_info"]["index"] == 1
    assert rows[0]["ability"] == "math"


def test_gsm8k_errors_name_file_line_and_field(tmp_path):
    src = _jsonl(tmp_path / "train.jsonl", {"question": "q", "answer": "#### 2"}, {"question": "q", "answer": "no marker"})
    with pytest.raises(
        ValueError, match=r"train\.jsonl: line 2: field 'answer' has no final '#### <number>'"
    ):
        gsm8k.main(["--input", str(src), "--output_dir", str(tmp_path / "o")])
    _jsonl(src, {"question": "q"})
    with pytest.raises(ValueError, match=r"line 1: field 'answer' must be a string, but it is missing"):
        gsm8k.main(["--input", str(src), "--output_dir", str(tmp_path / "o")])


@pytest.mark.parametrize(
    "solution, answer",
    [
        ("So $x = \\boxed{5}$.", "5"),
        ("First \\boxed{1}, finally \\boxed{\\frac{1}{2}}.", "\\frac{1}{2}"),
        ("\\fbox{a{b}c}", "a{b}c"),
        ("The answer is $\\boxed 7$.", "7"),
        ("no box here", None),
        ("\\boxed{unbalanced", None),
    ],
)
def test_last_boxed(solution, answer):
    assert math_dataset.last_boxed(solution) == answer


def test_math_directory_of_json_files(tmp_path):
    d = tmp_path / "MATH" / "test" / "algebra"
    d.mkdir(parents=True)
    (d / "1.json").write_text(
        json.dumps(
            {"problem": "Solve $x+1=3$.", "level": "Level 1", "type": "Algebra", "solution": "$x=\\boxed{2}$"}
        )
    )
    (d / "2.json").write_text(
        json.dumps(
            {
                "problem": "Half of 1?",
                "level": "Level 2",
                "type": "Algebra",
                "solution": "$\\boxed{\\frac{1}{2}}$",
            }
        )
    )
    out = tmp_path / "out"
    math_dataset.main(["--input", str(tmp_path / "MATH" / "test"), "--output_dir", str(out)])
    rows = pq.read_table(out / "test.parquet").to_pylist()
    assert [r["reward_model"]["ground_truth"] for r in rows] == ["2", "\\frac{1}{2}"]
    assert rows[0]["data_source"] == "DigitalLearningGmbH/MATH-lighteval"
    assert (
        rows[0]["prompt"][0]["content"]
        == "Solve $x+1=3$. Let's think step by step and output the final answer within \\boxed{}."
    )
    assert rows[1]["extra_info"] == {"split": "test", "index": 1, "level": "Level 2", "type": "Algebra"}


def test_math_jsonl_missing_box_is_an_error(tmp_path):
    src = _jsonl(tmp_path / "math.jsonl", {"problem": "p", "solution": "answer 3"})
    with pytest.raises(ValueError, match=r"math\.jsonl: line 1: field 'solution' has no complete \\boxed"):
        math_dataset.main(["--input", str(src), "--output_dir", str(tmp_path / "o"), "--split", "train"])
