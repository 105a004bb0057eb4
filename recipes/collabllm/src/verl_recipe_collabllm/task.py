"""The CPU default's built-in task, where asking a clarifying question pays.

The user asks "Add 3 to my number." and has a secret number in mind (0..9) that the request leaves
out. The simulated user knows the complete request ("Add 3 to my number. My number is 5.") and gives
the number only when the assistant asks a question; an assistant that answers straight away gets the
conversation ended by the user. The answer is scored by verl-rewards' exact-match ``arithmetic``
scorer against the sum. So guessing is right about one time in eighteen, and asking ("Which
number?") then adding is right as often as the policy adds correctly.

- `make_rows(split)`: every (offset 1..9, number 0..9) of a split (a stable hash puts about one in
  eight in ``test``) in the RL row contract, run by ``collabllm_agent`` with the ``collabllm``
  interaction;
- `simulate_user(complete_request, last_assistant_message)`: the rule-based user (served over HTTP by
  `verl_recipe_collabllm.sim_server`, so it is reached through the same client as an LLM user);
- `demonstrations(...)`: conversations for the warm start (asking, guessing, and answering after the
  number was given), so the tiny model starts out asking sometimes and adding sometimes right.
"""

from __future__ import annotations

import random
import re
from typing import Any

from verl_recipe_collabllm.interaction import TERMINATION_SIGNAL

DATA_SOURCE = "arithmetic"  # verl-rewards' exact-match scorer
TASK_DESC = "adding a number to the user's secret number"
OFFSETS = range(1, 10)
NUMBERS = range(0, 10)
ASK = "Which number?"
_SECRET = re.compile(r"My number is (\d+)\.")


def request(offset: int) -> str:
    return f"Add {offset} to my number."


def complete_request(offset: int, number: int) -> str:
    return f"{request(offset)} My number is {number}."


def reveal(number: int) -> str:
    return f"It is {number}."


def split_of(offset: int, number: int) -> str:
    from verl.utils.dataset.tasks import arithmetic_split

    return arithmetic_split(offset, number, "+")


def make_rows(split: str, answer_turns: bool = False) -> list[dict[str, Any]]:
    """Every problem of ``split`` (``train`` or ``test``) as an RL row whose trained turn is the first
    answer to the request (``extra_info.turn`` 1). With ``answer_turns`` each problem also comes as the
    conversation after the question was asked and answered (turn 2: the trained turn is the sum), as the
    paper's datasets hold every turn of their conversations; RL then keeps (and improves) the adding
    that makes asking worth it, instead of wearing it away by training the opening turn alone."""
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    rows = []
    for offset in OFFSETS:
        for number in NUMBERS:
            if split_of(offset, number) != split:
                continue
            opening = [{"role": "user", "content": request(offset)}]
            told = opening + [
                {"role": "assistant", "content": ASK},
                {"role": "user", "content": reveal(number)},
            ]
            for turn, prompt in ((1, opening), (2, told))[: 2 if answer_turns else 1]:
                rows.append(_row(split, len(rows), turn, prompt, offset, number))
    return rows


def _row(split: str, index: int, turn: int, prompt: list[dict], offset: int, number: int) -> dict[str, Any]:
    return {
        "data_source": DATA_SOURCE,
        "prompt": prompt,
        "ability": "collaboration",
        "reward_model": {"style": "rule", "ground_truth": str(offset + number)},
        "agent_name": "collabllm_agent",
        "extra_info": {
            "split": split,
            "index": index,
            "turn": turn,
            "interaction_kwargs": {
                "name": "collabllm",
                "single_turn_prompt": complete_request(offset, number),
                "task_desc": TASK_DESC,
            },
        },
    }


def is_question(text: str) -> bool:
    return text.rstrip().endswith("?")


def simulate_user(complete: str, last_assistant_message: str) -> dict[str, str]:
    """The rule-based user's JSON reply (the simulator prompt's format): the secret number when the
    assistant asked a question, else the termination signal (the user has an answer, right or not)."""
    found = _SECRET.search(complete)
    if found is None:
        raise ValueError(f"the complete request {complete!r} does not say 'My number is <n>.'")
    number = found.group(1)
    if is_question(last_assistant_message):
        return {
            "current_answer": "none yet",
            "thought": "The assistant needs my number.",
            "response": reveal(int(number)),
        }
    return {
        "current_answer": last_assistant_message,
        "thought": "I got an answer.",
        "response": TERMINATION_SIGNAL,
    }


def demonstrations(
    rows: list[dict[str, Any]], ask_share: float, seed: int
) -> list[tuple[list[dict], list[bool]]]:
    """Warm-start conversations, each with which of its messages are trained on (the assistant's):

    - with probability ``ask_share``: ask, get the number, answer the sum (both turns trained);
    - otherwise: guess a sum in 1..18 at once (trained), plus the same row's ask-and-answer
      conversation with only the answer trained, so adding is learned without teaching to ask.
    """
    rng = random.Random(seed)
    out = []
    for row in rows:
        prompt = list(row["prompt"])
        offset = int(prompt[-1]["content"].split()[1])
        number = int(_SECRET.search(row["extra_info"]["interaction_kwargs"]["single_turn_prompt"]).group(1))
        asked = prompt + [
            {"role": "assistant", "content": ASK},
            {"role": "user", "content": reveal(number)},
            {"role": "assistant", "content": str(offset + number)},
        ]
        if rng.random() < ask_share:
            out.append((asked, [False] * len(prompt) + [True, False, True]))
        else:
            out.append(
                (
                    prompt + [{"role": "assistant", "content": str(rng.randint(1, 18))}],
                    [False] * len(prompt) + [True],
                )
            )
            out.append((asked, [False] * len(prompt) + [False, False, True]))
    return out
