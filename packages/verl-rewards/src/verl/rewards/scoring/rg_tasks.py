"""``reasoning_gym/<task>``: score with reasoning_gym's own scorer for that task (imported lazily).

reasoning_gym scorers take ``(answer, entry)`` where ``entry`` is the generated row (``question``,
``answer``, ``metadata``). The row's ``extra_info`` may carry the ``entry`` (or its ``metadata``); the
ground truth fills ``answer``. The answer is taken after the last ``Answer:`` / ``<answer>`` tag
when present, else the stripped response.
"""

from __future__ import annotations

import functools
import re

_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


def extract_answer(solution_str: str) -> str:
    tagged = _TAG.findall(solution_str)
    if tagged:
        return tagged[-1].strip()
    idx = solution_str.rfind("Answer:")
    if idx >= 0:
        return solution_str[idx + len("Answer:") :].strip()
    return solution_str.strip()


@functools.cache
def _scorer(task: str):
    try:
        import reasoning_gym
    except ImportError as e:
        raise ImportError(
            "data_source 'reasoning_gym/...' needs the reasoning-gym package: pip install reasoning-gym"
        ) from e
    try:
        return reasoning_gym.get_score_answer_fn(task)
    except ValueError as e:
        raise ValueError(f"data_source 'reasoning_gym/{task}': {e}") from e


def compute_score(task: str, solution_str: str, ground_truth, extra_info: dict | None = None) -> float:
    extra_info = dict(extra_info or {})
    entry = dict(extra_info.get("entry") or {})
    entry.setdefault("answer", ground_truth)
    entry.setdefault("question", extra_info.get("question", ""))
    entry.setdefault("metadata", extra_info.get("metadata", {}))
    return float(_scorer(task)(extract_answer(solution_str), entry))
