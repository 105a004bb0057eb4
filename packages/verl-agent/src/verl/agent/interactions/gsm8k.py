"""A GSM8K-style tutor: says whether the model's last answer is right and lets it try again.

The answer is the text after the last ``####`` in the assistant's last message (else its last
number), compared with ``interaction_kwargs.ground_truth`` as numbers. A right answer ends the
conversation with score 1; a wrong one asks for another try with score 0.
"""

from __future__ import annotations

import re
from typing import Any

from verl.agent.interactions.base import BaseInteraction
from verl.registries import INTERACTIONS

_NUMBER_RE = re.compile(r"-?\d[\d,]*(?:\.\d+)?")
CORRECT = "Your response is correct!"
INCORRECT = "Your response is incorrect! You need to reflect on your answer and try again."


def extract_answer(text: str) -> str | None:
    if "####" in text:
        text = text.rsplit("####", 1)[1]
        found = _NUMBER_RE.findall(text)
        return found[0].replace(",", "") if found else None
    found = _NUMBER_RE.findall(text)
    return found[-1].replace(",", "") if found else None


def same_number(a: str | None, b: str) -> bool:
    if a is None:
        return False
    try:
        return abs(float(a) - float(str(b).replace(",", ""))) < 1e-6
    except ValueError:
        return a.strip() == str(b).strip()


@INTERACTIONS.register("gsm8k")
class Gsm8kInteraction(BaseInteraction):
    async def start_interaction(
        self, instance_id: str | None = None, ground_truth: Any = None, **kwargs: Any
    ) -> str:
        if ground_truth is None:
            raise ValueError("gsm8k interaction needs interaction_kwargs.ground_truth for each row")
        return await super().start_interaction(
            instance_id, ground_truth=str(ground_truth), score=0.0, **kwargs
        )

    async def generate_response(
        self, instance_id: str, messages: list[dict[str, Any]], **kwargs: Any
    ) -> tuple[bool, str, float, dict[str, Any]]:
        state = self._instances[instance_id]
        last = next((m["content"] for m in reversed(messages) if m["role"] == "assistant"), "")
        answer = extract_answer(last)
        right = same_number(answer, state["ground_truth"])
        state["score"] = 1.0 if right else 0.0
        return right, CORRECT if right else INCORRECT, state["score"], {"answer": answer}

    async def calculate_score(self, instance_id: str, **kwargs: Any) -> float:
        return self._instances[instance_id]["score"]
