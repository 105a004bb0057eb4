import pytest
from verl.rewards.scoring import arithmetic, dapo_math, rg_tasks

ARITH = [
    ("68", "68", 1.0),
    ("  68\n", "68", 1.0),
    ("23+45 = 68 #### 68", "68", 1.0),
    ("work... Answer: 68", "68", 1.0),
    ("#### 12 ... Answer: 68", "68", 1.0),  # the last marker counts
    ("680", "68", 0.0),  # contains the answer but is not it
    ("68 apples", "68", 0.0),
    ("the answer is 68", "68", 0.0),
    ("#### 68.0", "68", 0.0),  # exact match, not numeric equality
    ("", "68", 0.0),
]


@pytest.mark.parametrize("response,gt,want", ARITH)
def test_arithmetic_exact_match(response, gt, want):
    assert arithmetic.compute_score(response, gt) == want


DAPO = [
    ("reasoning...\nAnswer: 42", "42", 1.0, "42"),
    ("Answer: $\\frac{1}{2}$", "\\frac{1}{2}", 1.0, "$\\frac{1}{2}$"),
    ("Answer: \\boxed{1,000}", "1000", 1.0, "\\boxed{1,000}"),
    ("Answer: 41", "42", -1.0, "41"),
    ("answer: 7\nAnswer: 8", "8", 1.0, "8"),
    ("I believe it is 42", "42", -1.0, ""),  # missing the format
]


@pytest.mark.parametrize("response,gt,want,pred", DAPO)
def test_dapo(response, gt, want, pred):
    out = dapo_math.compute_score(response, gt, timeout=60)
    verdict = "passed" if want == 1.0 else "wrong_answer" if pred else "format"
    assert out == {"score": want, "acc": want == 1.0, "pred": pred, "verdict": verdict}


STRICT_BOX = [
    ("so the answer is \\boxed{42}.", "42", 1.0, "42"),
    ("\\boxed{41} no, \\boxed{42}", "42", 1.0, "42"),  # the last box counts
    ("\\boxed{42} no, \\boxed{41}", "42", -1.0, "41"),
    ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}", 1.0, "\\frac{1}{2}"),  # nested braces kept whole
    ("\\boxed{ 42}", "42", -1.0, " 42"),  # exact string, no normalization
    ("\\boxed{0.5}", "\\frac{1}{2}", -1.0, "0.5"),  # no equivalence check either
    ("Answer: 42", "42", -1.0, "[INVALID]"),  # no box: wrong, whatever the text says
    ("\\boxed{42", "42", -1.0, "[INVALID]"),  # unclosed
    ("\\fbox{42}", "42", -1.0, "[INVALID]"),  # only the \\boxed{ spelling
    ("\\boxed{42}" + "x" * 91, "42", -1.0, "[INVALID]"),  # the box starts before the last 100 characters
    ("\\boxed{42}" + "x" * 90, "42", 1.0, "42"),  # ... and here it is inside them
]


@pytest.mark.parametrize("response,gt,want,pred", STRICT_BOX)
def test_dapo_strict_box(response, gt, want, pred):
    out = dapo_math.compute_score(response, gt, strict_box_verify=True)
    verdict = "passed" if want == 1.0 else "format" if pred == "[INVALID]" else "wrong_answer"
    assert out == {"score": want, "acc": want == 1.0, "pred": pred, "verdict": verdict}


def test_reasoning_gym_scores_with_its_own_scorer():
    import reasoning_gym

    ds = reasoning_gym.create_dataset("basic_arithmetic", size=4, seed=3)
    for entry in ds:
        extra = {"metadata": entry["metadata"]}
        want_right = ds.score_answer(entry["answer"], entry)
        assert (
            rg_tasks.compute_score(
                "basic_arithmetic", f"<answer>{entry['answer']}</answer>", entry["answer"], extra
            )
            == want_right
            == 1.0
        )
        wrong = str(int(entry["answer"]) + 1)
        assert rg_tasks.compute_score(
            "basic_arithmetic", f"Answer: {wrong}", entry["answer"], extra
        ) == ds.score_answer(wrong, entry)


def test_reasoning_gym_unknown_task_is_named():
    with pytest.raises(ValueError, match="reasoning_gym/no_such_task"):
        rg_tasks.compute_score("no_such_task", "1", "1")
