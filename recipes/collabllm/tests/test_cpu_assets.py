"""The CPU default's task and warm-start data: rows, demonstrations, and the loss masks of the warm start."""

from verl_recipe_collabllm import cpu_assets, task


def test_task_rows_split_every_problem_once():
    train, test = task.make_rows("train"), task.make_rows("test")
    assert len(train) + len(test) == 9 * 10 and len(test) == 7
    seen = set()
    for row in train + test:
        kwargs = row["extra_info"]["interaction_kwargs"]
        offset = int(row["prompt"][0]["content"].split()[1])
        number = int(kwargs["single_turn_prompt"].rsplit(" ", 1)[1].rstrip("."))
        assert row["prompt"] == [
            {"role": "user", "content": f"Add {offset} to my number."}
        ]  # the number left out
        assert kwargs == {"name": "collabllm", "single_turn_prompt": f"Add {offset} to my number. My number is {number}.",
                          "task_desc": task.TASK_DESC}  # fmt: skip
        assert row["reward_model"]["ground_truth"] == str(offset + number)
        assert row["agent_name"] == "collabllm_agent" and row["data_source"] == "arithmetic"
        seen.add((offset, number))
    assert len(seen) == 90


def test_answer_turn_rows_continue_after_the_question():
    opening, both = task.make_rows("train"), task.make_rows("train", answer_turns=True)
    assert len(both) == 2 * len(opening)
    assert [r["extra_info"]["turn"] for r in both[:4]] == [1, 2, 1, 2]
    first, second = both[0], both[1]
    number = first["extra_info"]["interaction_kwargs"]["single_turn_prompt"].rsplit(" ", 1)[1].rstrip(".")
    assert second["prompt"] == first["prompt"] + [
        {"role": "assistant", "content": "Which number?"},
        {"role": "user", "content": f"It is {number}."},
    ]
    assert second["reward_model"] == first["reward_model"]
    assert second["extra_info"]["interaction_kwargs"] == first["extra_info"]["interaction_kwargs"]


def test_rule_user_reveals_only_when_asked():
    complete = task.complete_request(4, 2)
    assert task.simulate_user(complete, "Which number?")["response"] == "It is 2."
    assert task.simulate_user(complete, "What number do you have in mind? ")["response"] == "It is 2."
    assert task.simulate_user(complete, "6")["response"] == "[[TERMINATE CHAT]]"
    assert task.simulate_user(complete, "Which number? I guess 6.")["response"] == "[[TERMINATE CHAT]]"


def test_demonstrations_mix_asking_and_guessing():
    rows = task.make_rows("train")
    demos = task.demonstrations(rows, ask_share=0.25, seed=0)
    asks = [d for d in demos if d[1] == [False, True, False, True]]
    guesses = [d for d in demos if d[1] == [False, True]]
    answers_only = [d for d in demos if d[1] == [False, False, False, True]]
    assert len(asks) + len(guesses) == len(rows) and len(answers_only) == len(
        guesses
    )  # one first turn per row
    assert 0.15 < len(asks) / len(rows) < 0.35
    msgs, _ = asks[0]
    offset, number = int(msgs[0]["content"].split()[1]), int(msgs[2]["content"].split()[-1].rstrip("."))
    assert [m["content"] for m in msgs[1:]] == ["Which number?", f"It is {number}.", str(offset + number)]
    assert all(1 <= int(m[-1]["content"]) <= 18 for m, _ in guesses)


def test_warm_start_trains_on_the_assistant_tokens_and_their_end_of_turn(char_tok):
    messages = [
        {"role": "user", "content": "Add 3 to my number."},
        {"role": "assistant", "content": "Which number?"},
        {"role": "user", "content": "It is 5."},
        {"role": "assistant", "content": "8"},
    ]
    ids, mask = cpu_assets.supervised_example(char_tok, messages, [False, True, False, True])
    trained = char_tok.decode([i for i, m in zip(ids, mask) if m])
    assert trained == "Which number?<|im_end|>8<|im_end|>"
    assert char_tok.decode(ids) == char_tok.apply_chat_template(messages, tokenize=False)
    _, mask = cpu_assets.supervised_example(char_tok, messages, [False, False, False, True])
    assert char_tok.decode([i for i, m in zip(ids, mask) if m]) == "8<|im_end|>"
