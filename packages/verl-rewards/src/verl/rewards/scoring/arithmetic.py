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


def compute_score(solution_str: str, ground_truth: str) -> float:
    return 1.0 if extract_answer(solution_str) == str(ground_truth).strip() else 0.0
