"""DAPO-Math scorer: the response ends with ``Answer: <answer>``; +1 when right, -1 otherwise.

Returns ``{"score", "acc", "pred"}`` as upstream, plus ``verdict`` (`verl.rewards.scoring.verdicts`). The answer after the last ``Answer:`` is normalized
(``$``, ``\\boxed{}``, ``\\text{}``, thousands separators, trailing period, spaces); equal strings
score at once, otherwise math-verify decides under the time limit.
"""

from __future__ import annotations

import re

from verl.rewards.scoring.math_equiv import (
    DEFAULT_TIMEOUT,
    equiv_verdict,
    last_boxed_only_string,
    remove_boxed,
)

_ANSWER = re.compile(r"Answer\s*:\s*([^\n]*)", re.IGNORECASE)
_TAIL = 300  # as upstream: only the end of the response is searched


def extract_answer(solution_str: str) -> str | None:
    found = _ANSWER.findall(solution_str[-_TAIL:])
    if not found:
        return None
    ans = found[-1].strip()
    return ans or None


def normalize_final_answer(ans: str) -> str:
    """Canonical string form used for the fast exact comparison."""
    ans = ans.strip()
    boxed = last_boxed_only_string(ans)
    if boxed is not None:
        ans = remove_boxed(boxed)
    ans = ans.strip().strip("$").strip()
    ans = re.sub(r"\\text\{(.*?)\}", r"\1", ans)
    ans = re.sub(r"\\(?:d|t)frac", r"\\frac", ans)
    ans = ans.rstrip(".")
    if re.fullmatch(r"-?[0-9]{1,3}(,[0-9]{3})+(\.[0-9]+)?", ans):
        ans = ans.replace(",", "")
    return "".join(ans.split())


def compute_score(solution_str: str, ground_truth: str, timeout: float = DEFAULT_TIMEOUT) -> dict:
    """``{"score": +1 | -1, "acc", "pred", "verdict"}``; ``verdict`` is ``format`` without an answer."""
    pred = extract_answer(solution_str)
    verdict = "format"
    if pred is not None:
        p, g = normalize_final_answer(pred), normalize_final_answer(str(ground_truth))
        verdict = "passed" if p == g else equiv_verdict(p, g, timeout=timeout) if p else "wrong_answer"
    correct = verdict == "passed"
    return {"score": 1.0 if correct else -1.0, "acc": correct, "pred": pred if pred is not None else "",
            "verdict": verdict}  # fmt: skip
