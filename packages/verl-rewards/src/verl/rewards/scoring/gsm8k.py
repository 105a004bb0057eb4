"""GSM8K scorer: the reference solution ends in ``#### <number>``.

``strict`` takes the number after the last ``####`` in the response; ``flexible`` takes the last
number anywhere in it. Numbers compare by value after dropping thousands separators, a ``$`` and a
trailing period, so ``#### 1,234.00`` matches ``1234``.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

_STRICT = re.compile(r"####\s*\$?\s*(-?[0-9][0-9,]*(?:\.[0-9]+)?|-?\.[0-9]+)")
_NUMBER = re.compile(r"-?[0-9][0-9,]*(?:\.[0-9]+)?|-?\.[0-9]+")
# Only the tail matters and regexes over megabytes of model output cost time.
_TAIL = 1000


def extract_solution(solution_str: str, method: str = "strict") -> str | None:
    """The answer string the response commits to, or None when it has none."""
    if method not in ("strict", "flexible"):
        raise ValueError(f"GSM8K extraction method must be 'strict' or 'flexible', got {method!r}")
    tail = solution_str[-_TAIL:]
    if method == "strict":
        found = _STRICT.findall(tail)
    else:
        found = _NUMBER.findall(tail)
    return _clean(found[-1]) if found else None


def _clean(num: str) -> str:
    return num.replace(",", "").rstrip(".")


def _as_decimal(text: str) -> Decimal | None:
    try:
        return Decimal(_clean(text.strip().lstrip("$")))
    except InvalidOperation:
        return None


def grade(solution_str: str, ground_truth: str, method: str = "strict") -> dict:
    """``{"score": 1.0 | 0.0, "verdict"}``: ``passed``, ``wrong_answer``, or ``format`` when the response
    commits to no number."""
    answer = extract_solution(solution_str, method=method)
    if answer is None:
        return {"score": 0.0, "verdict": "format"}
    want = _as_decimal(str(ground_truth).split("####")[-1])
    got = _as_decimal(answer)
    if want is None:
        raise ValueError(f"GSM8K ground truth {ground_truth!r} is not a number")
    right = got is not None and got == want
    return {"score": 1.0 if right else 0.0, "verdict": "passed" if right else "wrong_answer"}


def compute_score(
    solution_str: str,
    ground_truth: str,
    method: str = "strict",
    format_score: float = 0.0,
    score: float = 1.0,
) -> float:
    """``score`` for the right number, ``format_score`` for a wrong one, 0 when there is none."""
    verdict = grade(solution_str, ground_truth, method)["verdict"]
    return {"passed": score, "wrong_answer": format_score}.get(verdict, 0.0)
