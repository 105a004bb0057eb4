"""DAPO-Math scorer: the response ends with ``Answer: <answer>``; +1 when right, -1 otherwise.

Returns ``{"score", "acc", "pred"}`` as upstream, plus ``verdict`` (`verl.rewards.scoring.verdicts`). The answer after the last ``Answer:`` is normalized
(``$``, ``\\boxed{}``, ``\\text{}``, thousands separators, trailing period, spaces); equal strings
score at once, otherwise math-verify decides under the time limit.

``strict_box_verify=True`` is upstream's other check (ReTool's reward uses it): of the last 300
characters, the last 100 must hold a ``\\boxed{...}`` whose content equals the ground truth string
exactly, without normalization; ``pred`` is that content, or ``"[INVALID]"`` when there is no box.
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


_STRICT_TAIL = 100  # upstream's strict check reads only the end of the (already cut) response
_BOX = "\\boxed{"


def last_box_content(text: str) -> str | None:
    """The content of the last ``\\boxed{...}`` (braces balanced), or None when there is none or it is
    unclosed. Only the ``\\boxed{`` spelling counts, as in upstream's strict check."""
    start = text.rfind(_BOX)
    if start < 0:
        return None
    depth = 0
    for i in range(start + len(_BOX) - 1, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[start + len(_BOX) : i]
    return None


def is_correct_strict_box(solution_str: str, ground_truth: str) -> tuple[bool, str]:
    """Upstream's strict-box check (see the module doc): (correct, pred)."""
    content = last_box_content(solution_str[-_STRICT_TAIL:])
    pred = "[INVALID]" if content is None else content
    return pred == ground_truth, pred


def compute_score(
    solution_str: str, ground_truth: str, timeout: float = DEFAULT_TIMEOUT, strict_box_verify: bool = False
) -> dict:
    """``{"score": +1 | -1, "acc", "pred", "verdict"}``; ``verdict`` is ``format`` without an answer."""
    if strict_box_verify:
        correct, pred = is_correct_strict_box(solution_str[-_TAIL:], str(ground_truth))
        verdict = "passed" if correct else "format" if pred == "[INVALID]" else "wrong_answer"
        return {"score": 1.0 if correct else -1.0, "acc": correct, "pred": pred, "verdict": verdict}
    pred = extract_answer(solution_str)
    verdict = "format"
    if pred is not None:
        p, g = normalize_final_answer(pred), normalize_final_answer(str(ground_truth))
        verdict = "passed" if p == g else equiv_verdict(p, g, timeout=timeout) if p else "wrong_answer"
    correct = verdict == "passed"
    return {"score": 1.0 if correct else -1.0, "acc": correct, "pred": pred if pred is not None else "",
            "verdict": verdict}  # fmt: skip
