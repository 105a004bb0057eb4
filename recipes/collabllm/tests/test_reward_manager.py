"""The multiturn-aware reward: the aggregation by hand, the manager on a hand-built batch, its errors, and
the manager as core's reward loader builds it from config."""

import numpy as np
import pytest
import torch
from verl.protocol import DataProto
from verl_recipe_collabllm.reward_manager import CollabLLMRewardManager, multiturn_aware_reward

REQUEST = [{"role": "user", "content": "Add 3 to my number."}]

# the rule variants (the CPU default's): no judge for accuracy, the last message as the final completion
RULE = {"accuracy_scorer": "rule", "completion_extraction": "last_message"}


def test_mr_is_the_sum_of_clipped_weighted_means():
    weights = {"accuracy": 1.0, "interactivity": 1.0, "token_amount": -1e-4}
    scores = {
        "accuracy": [1.0, 0.0, 1.0],
        "interactivity": [0.9, 0.6, 0.3],
        "token_amount": [100.0, 200.0, 300.0],
    }
    mr, parts = multiturn_aware_reward(scores, weights)
    # 2/3 + 0.6 + (-1e-4 * 200)
    assert parts == pytest.approx({"accuracy": 2 / 3, "interactivity": 0.6, "token_amount": -0.02})
    assert mr == pytest.approx(2 / 3 + 0.6 - 0.02)
    # each weighted mean is clipped to [-1, 1] before the sum: 2 * 0.75 -> 1, -0.01 * 150 -> -1
    mr, parts = multiturn_aware_reward(
        {"accuracy": [1.0, 0.5], "token_amount": [100.0, 200.0]}, {"accuracy": 2.0, "token_amount": -0.01}
    )
    assert parts == {"accuracy": 1.0, "token_amount": -1.0} and mr == 0.0
    with pytest.raises(ValueError, match="no conversation scored"):
        multiturn_aware_reward({"accuracy": []}, {"accuracy": 1.0})


def batch(conversations_per_row, ground_truths, response_lengths, width=6):
    """Rows whose ``messages`` column holds the given conversations (as collabllm_agent writes it)."""
    n = len(conversations_per_row)
    mask = torch.zeros((n, width), dtype=torch.long)
    for i, k in enumerate(response_lengths):
        mask[i, :k] = 1
    messages, prompts = np.empty(n, dtype=object), np.empty(n, dtype=object)
    for i, convs in enumerate(conversations_per_row):
        messages[i] = {"messages": convs}
        prompts[i] = list(REQUEST)
    return DataProto.from_dict(
        tensors={"responses": torch.ones((n, width), dtype=torch.long), "response_mask": mask},
        non_tensors={
            "messages": messages,
            "raw_prompt": prompts,
            "data_source": np.array(["arithmetic"] * n, dtype=object),
            "reward_model": np.array([{"ground_truth": g} for g in ground_truths], dtype=object),
            "extra_info": np.array([{}] * n, dtype=object),
        },
    )


def talk(*turns):
    roles = ["assistant", "user"] * len(turns)
    return REQUEST + [{"role": r, "content": t} for r, t in zip(roles, turns)]


def test_manager_scores_each_rows_futures_on_its_last_token(char_tok):
    data = batch(
        [
            [
                talk("Which number?", "It is 5.", "8"),
                talk("Which number?", "It is 5.", "9"),
            ],  # asked: 1 of 2 right
            [talk("7")],  # guessed wrong; the user ended the conversation
        ],
        ["8", "8"],
        response_lengths=[4, 2],
    )
    manager = CollabLLMRewardManager(char_tok, 0, metric_weights={"accuracy": 1.0, "token_amount": -0.01}, **RULE)
    out = manager(data, return_dict=True)
    # row 0: accuracy mean 0.5, words 2 + 3 + 1 = 6 in both -> 0.5 - 0.06; row 1: 0 - 0.01
    expected = [0.5 - 0.06, -0.01]
    reward = out["reward_tensor"]
    assert reward[0, 3].item() == pytest.approx(expected[0]) and reward[1, 1].item() == pytest.approx(
        expected[1]
    )
    assert reward.sum().item() == pytest.approx(sum(expected))  # nothing anywhere else
    info = out["reward_extra_info"]
    assert info["score"] == pytest.approx(expected)
    assert info["accuracy"] == [0.5, 0.0] and info["token_amount"] == [6.0, 1.0]
    assert info["first_turn_question"] == [1.0, 0.0] and info["num_conversations"] == [2, 1]
    assert out["reward_metrics"]["collabllm/metric_errors"] == 0.0
    assert torch.equal(manager(data), reward)  # return_dict=False: the tensor alone
    metrics = out["reward_metrics"]
    assert metrics["collabllm/opening/rows"] == 2 and "collabllm/later/rows" not in metrics
    assert (
        metrics["collabllm/opening/accuracy"] == 0.25
        and metrics["collabllm/opening/first_turn_question"] == 0.5
    )


def test_opening_and_later_rows_are_reported_apart(char_tok):
    told = talk("Which number?", "It is 5.")
    data = batch(
        [[talk("Which number?", "It is 5.", "8")], [told + [{"role": "assistant", "content": "8"}]]],
        ["8", "8"],
        [2, 1],
    )
    data.non_tensor_batch["raw_prompt"][1] = told  # row 1's trained turn answers after the question
    out = CollabLLMRewardManager(char_tok, 0, metric_weights={"accuracy": 1.0, "token_amount": -0.01}, **RULE)(
        data, return_dict=True
    )
    assert out["reward_extra_info"]["token_amount"] == [6.0, 1.0]  # only what follows each row's prompt
    m = out["reward_metrics"]
    assert (m["collabllm/opening/rows"], m["collabllm/later/rows"]) == (1, 1)
    assert (m["collabllm/opening/first_turn_question"], m["collabllm/later/first_turn_question"]) == (
        1.0,
        0.0,
    )
    assert (m["collabllm/opening/score"], m["collabllm/later/score"]) == pytest.approx((0.94, 0.99))


def test_manager_options_are_checked(char_tok):
    with pytest.raises(ValueError, match="metric_weights.bleu: unknown metric; known: .*bleu_score"):
        CollabLLMRewardManager(char_tok, 0, metric_weights={"bleu": 1.0})
    with pytest.raises(ValueError, match="must map metric names to weights"):
        CollabLLMRewardManager(char_tok, 0, metric_weights={})
    with pytest.raises(
        ValueError, match=r"\['interactivity'\], which ask an LLM judge .*: set reward.reward_kwargs.llm_judge_kwargs"
    ):
        CollabLLMRewardManager(char_tok, 0, metric_weights={"accuracy": 1, "interactivity": 1}, **RULE)
    # upstream's default: accuracy and the extraction for bleu_score / pass_rate ask the judge too
    with pytest.raises(ValueError, match=r"\['accuracy', 'bleu_score'\], which ask an LLM judge"):
        CollabLLMRewardManager(char_tok, 0, metric_weights={"accuracy": 1, "bleu_score": 1})
    with pytest.raises(ValueError, match="accuracy_scorer='exact' is not one of: llm_judge, rule"):
        CollabLLMRewardManager(char_tok, 0, metric_weights={"accuracy": 1}, accuracy_scorer="exact")
    with pytest.raises(ValueError, match="normalize_by_data_source=true is not implemented"):
        CollabLLMRewardManager(char_tok, 0, metric_weights={"accuracy": 1}, normalize_by_data_source=True, **RULE)
    with pytest.raises(ValueError, match="metric_weights.accuracy='1' must be a number"):
        CollabLLMRewardManager(char_tok, 0, metric_weights={"accuracy": "1"}, **RULE)
    with pytest.raises(ValueError, match="llm_judge_kwargs: api_key must not be written"):
        CollabLLMRewardManager(
            char_tok, 0, metric_weights={"interactivity": 1},
            llm_judge_kwargs={"model": "m", "api_base": "http://127.0.0.1:1/v1", "api_key": "sk"},
        )  # fmt: skip
    with pytest.raises(TypeError):
        CollabLLMRewardManager(char_tok, 0, metric_weights={"accuracy": 1}, metric_weight={"accuracy": 1}, **RULE)


def test_manager_needs_the_agent_loops_conversations(char_tok):
    manager = CollabLLMRewardManager(char_tok, 0, metric_weights={"accuracy": 1.0}, **RULE)
    data = batch([[talk("8")]], ["8"], [1])
    data.non_tensor_batch.pop("messages")
    with pytest.raises(KeyError, match="no 'messages' column .*collabllm_agent"):
        manager(data)


def test_a_failing_metric_stops_or_scores_zero(char_tok, scripted_server):
    url, set_replies = scripted_server
    set_replies("not json at all")
    judge = {"model": "judge", "api_base": url}
    data = batch([[talk("Which number?", "It is 5.", "8")], [talk("8")]], ["8", "8"], [2, 1])
    manager = CollabLLMRewardManager(
        char_tok, 0, metric_weights={"accuracy": 1, "interactivity": 1}, llm_judge_kwargs=judge, **RULE
    )
    with pytest.raises(
        RuntimeError, match="metric 'interactivity' failed on row 0, conversation 0: ValueError: no JSON"
    ):
        manager(data)
    lenient = CollabLLMRewardManager(
        char_tok,
        0,
        metric_weights={"accuracy": 1, "interactivity": 1},
        llm_judge_kwargs=judge,
        count_errors_as_zero=True,
        **RULE,
    )
    out = lenient(data, return_dict=True)
    assert out["reward_extra_info"]["score"] == [1.0, 1.0]  # accuracy 1, interactivity counted 0
    assert out["reward_metrics"]["collabllm/metric_errors"] == 2.0
    assert out["reward_metrics"]["collabllm/judge_calls"] == 2.0
    set_replies('{"thought": "good", "interactivity": 0.5}')
    assert lenient(data, return_dict=True)["reward_extra_info"]["score"] == [1.5, 1.5]


def test_core_loader_builds_it_from_the_reward_config(char_tok):
    from verl.rewards import load_reward_manager

    manager = load_reward_manager(
        {
            "reward_manager": "collabllm",
            "reward_kwargs": {"metric_weights": {"accuracy": 1, "token_amount": -0.01}, **RULE},
        },
        char_tok,
        num_examine=0,
    )
    assert isinstance(manager, CollabLLMRewardManager)
    assert manager.metric_weights == {"accuracy": 1.0, "token_amount": -0.01}
