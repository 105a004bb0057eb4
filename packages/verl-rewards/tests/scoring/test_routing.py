import pytest
from verl.rewards import default_compute_score
from verl.rewards.scoring import SCORERS, get_scorer, register_scorer


@pytest.mark.parametrize(
    "source,response,gt,want",
    [
        ("openai/gsm8k", "#### 12", "12", {"score": 1.0, "verdict": "passed"}),
        ("openai/gsm8k", "twelve", "12", {"score": 0.0, "verdict": "format"}),
        ("lighteval/MATH", "so \\boxed{\\frac{1}{2}}", "0.5", {"score": 1.0, "verdict": "passed"}),
        ("lighteval/MATH", "one half", "0.5", {"score": 0.0, "verdict": "format"}),
        ("arithmetic", "Answer: 12", "12", {"score": 1.0, "verdict": "passed"}),
        ("arithmetic", "12.0", "12", {"score": 0.0, "verdict": "wrong_answer"}),
        ("arithmetic", "Answer: ", "12", {"score": 0.0, "verdict": "format"}),
        ("reasoning_gym/basic_arithmetic", "<answer>12</answer>", "12", 1.0),
    ],
)
def test_routes_to_the_family_scorer(source, response, gt, want):
    assert default_compute_score(source, response, gt) == want


@pytest.mark.parametrize("source", ["math_dapo", "aime2024", "aime_2025"])
def test_dapo_family(source):
    assert default_compute_score(source, "Answer: 12", "12")["score"] == 1.0


@pytest.mark.parametrize(
    "source", ["lighteval/MATH", "DigitalLearningGmbH/MATH-lighteval", "HuggingFaceH4/MATH-500"]
)
def test_math_family(source):
    assert get_scorer(source) is get_scorer("lighteval/MATH")


@pytest.mark.parametrize(
    "source", ["codecontests", "apps", "taco", "codeforces", "livecodebench", "humaneval", "mbpp"]
)
def test_code_family(source):
    assert get_scorer(source) is get_scorer("apps")


def test_unknown_source_names_the_known_ones():
    with pytest.raises(ValueError) as e:
        default_compute_score("my/dataset", "x", "y")
    msg = str(e.value)
    assert (
        "'my/dataset'" in msg and "openai/gsm8k" in msg and "aime*" in msg and "reasoning_gym/<task>" in msg
    )


def test_register_scorer_and_duplicate_error():
    @register_scorer("test/upper")
    def upper(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
        return {"score": float(solution_str.upper() == ground_truth), "len": len(solution_str)}

    try:
        assert default_compute_score("test/upper", "ab", "AB") == {"score": 1.0, "len": 2}
        with pytest.raises(ValueError, match="already registered"):
            register_scorer("test/upper")(lambda *a, **k: 0.0)
    finally:
        SCORERS.unregister("test/upper")
