"""The built-in ``arithmetic`` task: exact match on the final answer.

The response is stripped and, when it contains ``####`` or ``Answer:``, cut to what follows the last
of them; that text must equal the ground truth exactly (``"68"`` is right, ``"680"``, ``"68 apples"``
and ``"the answer is 68"`` are not).
"""

from __future__ import annotations

_MARKERS = ("####", "Answer:")


def extract_answer(solution_str: str) -> str:
    text = solution_str.strip()
    found = [(text.rfind(m), m) for m in _MARKERS if m in text]
    if found:
        pos, marker = max(found)
        text = text[pos + len(marker) :].strip()
    return text


def grade(solution_str: str, ground_truth: str) -> dict:
    """``{"score": 1.0 | 0.0, "verdict"}``: ``format`` when the answer is empty."""
    answer = extract_answer(solution_str)
    if not answer:
        return {"score": 0.0, "verdict": "format"}
    right = answer == str(ground_truth).strip()
    return {"score": 1.0 if right else 0.0, "verdict": "passed" if right else "wrong_answer"}


def compute_score(solution_str: str, ground_truth: str) -> float:
    return grade(solution_str, ground_truth)["score"]
