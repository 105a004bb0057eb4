"""Each conversation-level metric against hand-derived values."""

import asyncio
import math

import pytest
from verl.rewards.models.chat_client import ChatClient
from verl.rewards.scoring import default_compute_score
from verl_recipe_collabllm.metrics import (
    METRICS,
    Conversation,
    MetricContext,
    MetricOptions,
    bleu,
    first_turn_question,
)

SYSTEM = {"role": "system", "content": "Be helpful."}
REQUEST = {"role": "user", "content": "Add 3 to my number."}


def conv(
    *turns: str, ground_truth="8", data_source="arithmetic", extra_info=None, system=True
) -> Conversation:
    """A conversation: [system], the request, then alternating assistant / user messages."""
    prompt = ([SYSTEM] if system else []) + [REQUEST]
    roles = ["assistant", "user"] * len(turns)
    messages = prompt + [{"role": r, "content": t} for r, t in zip(roles, turns)]
    return Conversation(messages, len(prompt), data_source, ground_truth, extra_info or {})


RULE = MetricOptions(accuracy_scorer="rule", completion_extraction="last_message", bleu_unit="word")


def score(name: str, c: Conversation, ctx: MetricContext | None = None) -> float:
    return asyncio.run(METRICS.get(name).fn(c, ctx or MetricContext(default_compute_score, options=RULE)))


def test_accuracy_scores_the_final_answer_with_the_rows_scorer():
    assert score("accuracy", conv("Which number?", "It is 5.", "8")) == 1.0
    assert score("accuracy", conv("Which number?", "It is 5.", "9")) == 0.0
    assert score("accuracy", conv("8")) == 1.0  # a right guess is right
    assert score("accuracy", conv("#### 8", ground_truth="8")) == 1.0  # the arithmetic scorer's marker
    # a custom scorer (reward.custom_reward_function) and its keyword arguments; a dict gives its score
    seen = {}

    def custom(data_source, solution_str, ground_truth, extra_info=None, bonus=0.0):
        seen.update(data_source=data_source, solution=solution_str, extra=extra_info)
        return {"score": 0.25 + bonus, "other": 1}

    ctx = MetricContext(custom, {"bonus": 0.5}, options=RULE)
    assert score("accuracy", conv("Which number?", "It is 5.", "8", extra_info={"k": 1}), ctx) == 0.75
    assert seen == {"data_source": "arithmetic", "solution": "8", "extra": {"k": 1}}


def test_token_amount_counts_words_after_the_prompt():
    # "Which number?" 2 + "It is 5." 3 + "8" 1; the system message and the request do not count
    assert score("token_amount", conv("Which number?", "It is 5.", "8")) == 6.0
    assert score("token_amount", conv("7")) == 1.0
    assert score("token_amount", conv("  two   words ", system=False)) == 2.0


def test_bleu_by_hand():
    # p1 = 5/6 (the, cat, sat, on, mat; "the" clipped to 1), p2 = 3/5, p3 = 2/4, p4 = 1/3; equal lengths: BP = 1
    assert bleu("the cat sat on the mat", "the cat sat on a mat") == pytest.approx(
        (5 / 6 * 3 / 5 * 2 / 4 * 1 / 3) ** 0.25
    )
    # shorter candidate: p1 = p2 = 1, BP = exp(1 - 6/3)
    assert bleu("the cat sat", "the cat sat on the mat", max_order=2) == pytest.approx(math.exp(-1))
    assert bleu("the cat sat", "the cat sat on the mat") == 0.0  # no 4-gram in the candidate
    assert bleu("a b c d", "a b c d") == 1.0
    assert bleu("", "a b c d") == 0.0
    # characters (upstream hands nltk two strings): "abcde" vs "abcdf": p1 4/5, p2 3/4, p3 2/3, p4 1/2, BP 1
    assert bleu("abcde", "abcdf", unit="char") == pytest.approx((4 / 5 * 3 / 4 * 2 / 3 * 1 / 2) ** 0.25)
    assert bleu("ab cd", "ab cd", unit="char") == 1.0 and bleu("abcde", "abcdf") == 0.0  # one word each: no match
    # the metric: the final completion against the ground truth
    c = conv("Which format?", "A sentence.", "the cat sat on the mat", ground_truth="the cat sat on a mat")
    assert score("bleu_score", c) == pytest.approx((1 / 12) ** 0.25)


def test_interactivity_asks_the_judge_and_reads_its_json(scripted_server):
    url, set_replies = scripted_server
    log = set_replies('Sure.\n```json\n{"thought": "asked the one thing needed", "interactivity": 0.7}\n```')
    ctx = MetricContext(default_compute_score, judge=ChatClient(url, "judge", backoff=0.01), options=RULE)
    assert score("interactivity", conv("Which number?", "It is 5.", "8"), ctx) == 0.7
    prompt = log.prompts[0]
    # the judge sees the conversation (system message left out) and the rubric's JSON format
    assert (
        "**User**: Add 3 to my number.\n**Assistant**: Which number?\n**User**: It is 5.\n**Assistant**: 8"
        in prompt
    )
    assert "Be helpful." not in prompt and '"interactivity"' in prompt
    set_replies("I would say 0.7")
    with pytest.raises(ValueError, match="no JSON object"):
        score("interactivity", conv("8"), ctx)
    set_replies('{"thought": "t", "interactivity": 7}')
    with pytest.raises(ValueError, match="outside \\[0, 1\\]"):
        score("interactivity", conv("8"), ctx)
    set_replies('{"thought": "t"}')
    with pytest.raises(ValueError, match="has no 'interactivity'"):
        score("interactivity", conv("8"), ctx)
    assert METRICS.get("interactivity").needs_judge(RULE) and not METRICS.get("accuracy").needs_judge(RULE)
    assert METRICS.get("accuracy").needs_judge(MetricOptions())  # upstream's default: the judge decides


def test_pass_rate_runs_the_final_code_against_the_tests():
    meta = {"test": "def check(candidate):\n    assert candidate(2, 3) == 5\n    assert candidate(0, 0) == 0\n",
            "entry_point": "add"}  # fmt: skip
    right = "Here it is:\n```python\ndef add(a, b):\n    return a + b\n```"
    wrong = "```python\ndef add(a, b):\n    return a * b\n```"
    assert (
        score(
            "pass_rate", conv("Which language?", "Python.", right, extra_info={"single_turn_metadata": meta})
        )
        == 1.0
    )
    assert score("pass_rate", conv(wrong, extra_info={"single_turn_metadata": meta})) == 0.0
    with pytest.raises(ValueError, match="single_turn_metadata with 'test'"):
        score("pass_rate", conv(right, extra_info={}))


def test_first_turn_question_looks_at_the_trained_turn_only():
    assert first_turn_question(conv("Which number?", "It is 5.", "8")) == 1.0
    assert first_turn_question(conv('Which number? ")')) == 1.0
    assert first_turn_question(conv("8", "Why?")) == 0.0  # the user's question does not count
    assert first_turn_question(conv("Is it 8? It is 8.")) == 0.0
