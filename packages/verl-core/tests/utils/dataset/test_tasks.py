"""Built-in task generators: correct answers, disjoint splits, determinism, the CLI writing parquet."""

import re
import subprocess
import sys

import pyarrow.parquet as pq
import pytest
from verl.utils.dataset import RLHFDataset
from verl.utils.dataset.rows import write_parquet
from verl.utils.dataset.tasks import make_arithmetic_rows, make_reasoning_gym_rows, make_task_splits


@pytest.mark.parametrize("op", ["+", "-", "*"])
def test_arithmetic_rows_have_correct_answers(op):
    rows = make_arithmetic_rows(200, seed=1, digits=2, op=op)
    assert len(rows) == 200
    for i, r in enumerate(rows):
        assert r["data_source"] == "arithmetic"
        (msg,) = r["prompt"]
        assert msg["role"] == "user"
        a, b = map(int, re.fullmatch(rf"(\d+){re.escape(op)}(\d+)=", msg["content"]).groups())
        assert 10 <= a <= 99 and 10 <= b <= 99
        want = {"+": a + b, "-": a - b, "*": a * b}[op]
        assert r["reward_model"] == {"style": "rule", "ground_truth": str(want)}
        assert r["extra_info"] == {"split": "train", "index": i}
    assert len({r["prompt"][0]["content"] for r in rows}) == 200  # distinct problems


def test_arithmetic_splits_are_disjoint_and_deterministic():
    train = make_arithmetic_rows(2000, seed=0, split="train")
    test = make_arithmetic_rows(200, seed=0, split="test")
    train_q = {r["prompt"][0]["content"] for r in train}
    test_q = {r["prompt"][0]["content"] for r in test}
    assert len(train_q) == 2000 and len(test_q) == 200 and not train_q & test_q
    # another seed draws other problems, still never crossing splits
    other = {r["prompt"][0]["content"] for r in make_arithmetic_rows(2000, seed=1, split="train")}
    assert other != train_q and not other & test_q
    # the same seed gives the same problems; asking for fewer gives a prefix
    assert make_arithmetic_rows(50, seed=0) == train[:50]


def test_arithmetic_one_digit_space_is_too_small():
    # 100 one-digit pairs, about 10 of them in the test split
    with pytest.raises(ValueError, match="could only find"):
        make_arithmetic_rows(50, seed=0, digits=1, split="test")


def test_reasoning_gym_rows_score_with_reasoning_gym():
    reasoning_gym = pytest.importorskip("reasoning_gym")
    rows = make_reasoning_gym_rows("basic_arithmetic", 8, seed=3)
    score = reasoning_gym.get_score_answer_fn("basic_arithmetic")
    for i, r in enumerate(rows):
        assert r["data_source"] == "reasoning_gym/basic_arithmetic"
        entry = {
            "question": r["prompt"][0]["content"],
            "answer": r["reward_model"]["ground_truth"],
            "metadata": r["extra_info"]["metadata"],
        }
        assert score(r["reward_model"]["ground_truth"], entry) == 1.0
        assert score("definitely wrong", entry) < 1.0
        assert r["extra_info"]["index"] == i


def test_reasoning_gym_splits_do_not_share_questions():
    pytest.importorskip("reasoning_gym")
    splits = make_task_splits("reasoning_gym/basic_arithmetic", 20, 5, seed=0)
    train_q = {r["prompt"][0]["content"] for r in splits["train"]}
    assert len(splits["test"]) == 5
    assert not train_q & {r["prompt"][0]["content"] for r in splits["test"]}


def test_cli_writes_parquet_the_dataset_reads(tmp_path, char_tokenizer):
    out = tmp_path / "arith"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "verl.utils.dataset.tasks",
            "--task",
            "arithmetic",
            "--train",
            "40",
            "--test",
            "8",
            "--out",
            str(out),
        ],
        check=True,
        capture_output=True,
    )
    train = pq.read_table(out / "train.parquet").to_pylist()
    assert len(train) == 40 and len(pq.read_table(out / "test.parquet").to_pylist()) == 8
    assert train == make_arithmetic_rows(40, seed=0)
    ds = RLHFDataset(str(out / "train.parquet"), char_tokenizer, config={"max_prompt_length": 16})
    assert len(ds) == 40 and ds[3]["reward_model"]["ground_truth"] == train[3]["reward_model"]["ground_truth"]


def test_write_parquet_falls_back_to_json_metadata(tmp_path):
    rows = [
        {"data_source": "x", "extra_info": {"metadata": {"v": 1}}},
        {"data_source": "x", "extra_info": {"metadata": {"v": "one"}}},  # no common Arrow type for v
    ]
    got = pq.read_table(write_parquet(rows, tmp_path / "m.parquet")).to_pylist()
    assert [r["extra_info"]["metadata"] for r in got] == ['{"v": 1}', '{"v": "one"}']
