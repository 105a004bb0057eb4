"""MATH-style scorer: the last ``\\boxed{...}`` of the response, compared with math-verify.

math-verify parses both sides to sympy and compares them (fractions, decimals, LaTeX, symbolic
equality, sets and intervals). Both parse and compare run in a time-limited helper process
(`verl.rewards.utils.time_limit`), so a pathological expression costs at most ``timeout`` seconds
and works from any thread; math-verify's own signal-based timeouts are switched off.
"""

from __future__ import annotations

from verl.rewards.utils.time_limit import call_with_time_limit

DEFAULT_TIMEOUT = 5.0


def last_boxed_only_string(text: str) -> str | None:
    """The last ``\\boxed{...}`` / ``\\fbox{...}`` (or ``\\boxed 5``) in text, braces balanced."""
    idx = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    if idx < 0:
        return None
    rest = text[idx:]
    name = "\\boxed" if rest.startswith("\\boxed") else "\\fbox"
    after = rest[len(name) :]
    if after.startswith(" "):  # \boxed 5: the answer runs to the next '$' or end of line
        body = after[1:].split("$")[0].split("\n")[0].strip()
        return f"{name}{{{body}}}" if body else None
    if not after.startswith("{"):
        return None
    depth = 0
    for i, ch in enumerate(after):
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return name + after[: i + 1]
    return None  # unbalanced: malformed output


def remove_boxed(boxed: str) -> str:
    """``\\boxed{x}`` -> ``x``."""
    for name in ("\\boxed", "\\fbox"):
        if boxed.startswith(name + "{") and boxed.endswith("}"):
            return boxed[len(name) + 1 : -1]
    raise ValueError(f"not a boxed expression: {boxed!r}")


def _strip_spaces(s: str) -> str:
    return "".join(s.split())


def verify_latex(answer: str, ground_truth: str) -> bool:
    """math-verify equivalence of two LaTeX answers, in this process, without any timeout."""
    import math_verify.grader
    import math_verify.parser
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

    # We enforce the limit from outside (see module docstring); silence the "timeout disabled" notice.
    math_verify.parser.TIMEOUT_WARNING_SHOWN = True
    math_verify.grader.TIMEOUT_WARNING_SHOWN = True

    configs = [LatexExtractionConfig(), ExprExtractionConfig()]
    gold = parse(f"${ground_truth}$", extraction_config=configs, parsing_timeout=None)
    pred = parse(f"${answer}$", extraction_config=configs, parsing_timeout=None)
    if not gold or not pred:
        return False
    return bool(verify(gold, pred, timeout_seconds=None))


def equiv_verdict(answer: str, ground_truth: str, timeout: float = DEFAULT_TIMEOUT) -> str:
    """``passed`` when answer and ground truth are the same math, ``wrong_answer`` when not,
    ``timeout`` when math-verify did not decide within ``timeout`` s."""
    if _strip_spaces(answer) == _strip_spaces(ground_truth):
        return "passed"
    try:
        return (
            "passed"
            if call_with_time_limit(verify_latex, answer, ground_truth, timeout=timeout)
            else "wrong_answer"
        )
    except TimeoutError:
        return "timeout"


def is_equiv(answer: str, ground_truth: str, timeout: float = DEFAULT_TIMEOUT) -> bool:
    """True when answer and ground truth are the same math; False on a miss or after ``timeout`` s."""
    return equiv_verdict(answer, ground_truth, timeout) == "passed"


def grade(solution_str: str, ground_truth: str, timeout: float = DEFAULT_TIMEOUT) -> dict:
    """``{"score": 1.0 | 0.0, "verdict"}`` for the last boxed answer; ``format`` when there is none."""
    boxed = last_boxed_only_string(solution_str)
    if boxed is None:
        return {"score": 0.0, "verdict": "format"}
    answer = remove_boxed(boxed)
    gt = str(ground_truth)
    gt_boxed = last_boxed_only_string(gt)
    if gt_boxed is not None:
        gt = remove_boxed(gt_boxed)
    verdict = equiv_verdict(answer, gt, timeout=timeout)
    return {"score": 1.0 if verdict == "passed" else 0.0, "verdict": verdict}


def compute_score(solution_str: str, ground_truth: str, timeout: float = DEFAULT_TIMEOUT) -> float:
    """1.0 when the last boxed answer equals the ground truth, else 0.0 (no box: 0.0)."""
    return grade(solution_str, ground_truth, timeout)["score"]
