"""Upstream's ReTool reward: the strict last-box check (+1 / -1) and the tool bonus on wrong answers, capped.

Expected values are worked out by hand from upstream's rule: a wrong answer scores
min(-0.6, -1 + (num_turns - 2) / 2 * 0.1), where num_turns counts the prompt, assistant and tool turns.
"""

import pytest
from verl.agent.tools.parser import format_tool_call
from verl_recipe_retool import reward

CALL = format_tool_call("code_interpreter", {"code": "print(59*63)"})


def score(response, num_turns, truth="3717"):
    return reward.compute_score("retool_arith", response, truth, {"num_turns": num_turns})


def test_a_boxed_answer_scores_one():
    out = score(f"{CALL}\ntool\n3717\nassistant\nSo it is \\boxed{{3717}}", num_turns=4)
    assert (out["score"], out["acc"], out["pred"]) == (1.0, 1.0, "3717")
    assert (out["tool_call"], out["tool_correct"]) == (1.0, 1.0)


def test_a_right_answer_gets_no_bonus_for_tools():
    assert score("\\boxed{3717}", num_turns=12)["score"] == 1.0


def test_a_wrong_boxed_answer_scores_minus_one_without_tools():
    out = score("\\boxed{3771}", num_turns=2)  # the prompt and one answer: no call
    assert (out["score"], out["acc"], out["pred"]) == (-1.0, 0.0, "3771")


def test_an_answer_with_no_box_is_wrong():
    out = score("Answer: 3717", num_turns=2)  # the old `Answer:` / `####` formats do not count
    assert (out["score"], out["acc"], out["pred"]) == (-1.0, 0.0, "[INVALID]")
    assert score("#### 3717", num_turns=2)["score"] == -1.0


@pytest.mark.parametrize(
    ("num_turns", "expected"),
    [
        (4, -0.9),  # one call: the call's turn and the tool's answer are two turns, +0.1
        (6, -0.8),  # two calls
        (8, -0.7),  # three calls
        (10, -0.6),  # four calls reach the cap
        (16, -0.6),  # seven calls: capped, a wrong answer never scores above -0.6
    ],
)
def test_the_tool_bonus_on_wrong_answers_and_its_cap(num_turns, expected):
    assert score("\\boxed{1}", num_turns)["score"] == pytest.approx(expected)


def test_num_turns_is_required():
    with pytest.raises(KeyError, match="num_turns"):
        reward.compute_score("retool_arith", "\\boxed{3717}", "3717", {})


def test_it_loads_as_upstream_loads_a_custom_reward_function():
    from verl.trainer.ppo.reward import load_custom_reward_function
    from verl_recipe_retool.config import recipe_files

    fn = load_custom_reward_function(recipe_files()["reward"], "compute_score")
    out = fn(data_source="math_dapo", solution_str="\\boxed{7}", ground_truth="7", extra_info={"num_turns": 2})
    assert out["score"] == 1.0
