"""The built-in task's rows and its final_answer scorer (strict box, 1/0; tool use judged from the response text)."""

import pytest
from verl.agent.tools.parser import format_tool_call
from verl.rewards.scoring import SCORERS
from verl_recipe_retool import task

CALL = format_tool_call("code_interpreter", {"code": "print(59*63)"})


def test_rows_follow_the_row_contract_and_splits_are_disjoint():
    train, test = task.split_rows(50, 20, seed=3, digits=2)
    for r in train + test:
        a, b = r["extra_info"]["a"], r["extra_info"]["b"]
        assert 10 <= a <= 99 and 10 <= b <= 99
        assert r["prompt"] == [{"role": "user", "content": f"Compute {a}*{b}."}]
        assert r["reward_model"]["ground_truth"] == str(a * b) and r["agent_name"] == "tool_agent"
        assert r["data_source"] == "retool_arith"
    pairs = lambda rows: {(r["extra_info"]["a"], r["extra_info"]["b"]) for r in rows}  # noqa: E731
    assert len(pairs(train)) == 50 and len(pairs(test)) == 20 and not pairs(train) & pairs(test)
    assert task.split_rows(50, 20, seed=3, digits=2) == (train, test)  # seeded


def test_too_many_problems_is_an_error():
    with pytest.raises(ValueError, match="cannot draw 82 distinct 1-digit problems"):
        task.make_rows(82, seed=0, digits=1)


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        # called the tool, copied its output into the box: right, and right through the tool
        (f"{CALL}\ntool\n3717\nassistant\n\\boxed{{3717}}", (1.0, 1.0, 1.0)),
        # direct answer, right: no tool use
        ("\\boxed{3717}", (1.0, 0.0, 0.0)),
        # called the tool but answered something else
        (f"{CALL}\ntool\n3717\nassistant\n\\boxed{{3771}}", (0.0, 1.0, 0.0)),
        # called the tool with wrong code; a right answer did not come from the tool output
        (f"{CALL.replace('59*63', '59*36')}\ntool\n2124\nassistant\n\\boxed{{3717}}", (1.0, 1.0, 0.0)),
        # a malformed call is no tool use
        ('<tool_call>{"name": "code_interpreter"</tool_call>\n\\boxed{3717}', (1.0, 0.0, 0.0)),
        # no box: wrong (the `####` marker no longer counts)
        ("#### 3717", (0.0, 0.0, 0.0)),
        ("3717 is the answer", (0.0, 0.0, 0.0)),
    ],
)
def test_final_answer_scorer(response, expected):
    out = SCORERS.get("retool_arith")("retool_arith", response, "3717")
    assert (out["acc"], out["tool_call"], out["tool_correct"]) == expected and out["score"] == out["acc"]
