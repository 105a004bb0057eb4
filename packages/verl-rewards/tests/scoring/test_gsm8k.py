import pytest
from verl.rewards.scoring.gsm8k import compute_score, extract_solution

STRICT = [
    # (response, ground truth, expected score)
    ("She has 3 + 4 = 7 apples.\n#### 7", "7", 1.0),
    ("#### 1,234", "1234", 1.0),  # thousands separator
    ("#### $68", "68", 1.0),  # currency sign
    ("#### 68.", "68", 1.0),  # trailing period
    ("#### 68.00", "68", 1.0),  # same value, other form
    ("#### -5", "-5", 1.0),
    ("first guess #### 3 then corrected #### 4", "4", 1.0),  # the last #### counts
    ("#### 680", "68", 0.0),  # near miss
    ("#### 6", "68", 0.0),
    ("#### -68", "68", 0.0),
    ("The answer is 68", "68", 0.0),  # no #### at all: strict gives nothing
    ("#### sixty-eight", "68", 0.0),  # malformed
    ("", "68", 0.0),
    ("#### 68", "#### 68", 1.0),  # the dataset's full answer string as ground truth
]


@pytest.mark.parametrize("response,gt,want", STRICT)
def test_strict(response, gt, want):
    assert compute_score(response, gt, method="strict") == want


FLEXIBLE = [
    ("The answer is 68", "68", 1.0),
    ("3 + 4 = 7, so 7 apples, total 1,234.", "1234", 1.0),
    ("I think 12 then 13", "12", 0.0),  # the last number counts
    ("no numbers here", "12", 0.0),
]


@pytest.mark.parametrize("response,gt,want", FLEXIBLE)
def test_flexible(response, gt, want):
    assert compute_score(response, gt, method="flexible") == want


def test_format_score_for_a_wrong_number_and_extraction():
    assert compute_score("#### 5", "6", format_score=0.1) == 0.1
    assert compute_score("no answer", "6", format_score=0.1) == 0.0
    assert extract_solution("x #### 1,000.") == "1000"
    with pytest.raises(ValueError, match="'strict' or 'flexible'"):
        extract_solution("#### 1", method="loose")
