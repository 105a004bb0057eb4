"""Why a sample got its score: one ``verdict`` per scored sample, and their shares per step.

Code and math scorers return ``verdict`` with their score; reward managers turn a batch's verdicts into
``reward/verdict/<kind>`` metrics (the share of scored samples with that verdict, every kind reported
each step, 0 included), so a rising share of one kind (timeouts, refused hacks) shows in the run's
metrics and plot.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

#: every verdict, in the order the metrics list them
VERDICTS = ("passed", "wrong_answer", "format", "timeout", "runtime_error", "hack", "sandbox_error")
METRIC_PREFIX = "reward/verdict/"

_CODE_FAILURES = {
    "none": "passed",
    "wrong_answer": "wrong_answer",
    "syntax_error": "format",
    "timeout": "timeout",
    "runtime_error": "runtime_error",
    "memory_limit": "runtime_error",
    "hack": "hack",
    "sandbox_error": "sandbox_error",
}


def verdict_of(failure: str) -> str:
    """The verdict of the code scorer's ``failure`` kind."""
    try:
        return _CODE_FAILURES[failure]
    except KeyError:
        raise ValueError(f"unknown code failure kind {failure!r}; known: {sorted(_CODE_FAILURES)}") from None


def verdict_metrics(verdicts: Iterable[str | None]) -> dict[str, float]:
    """``{reward/verdict/<kind>: share}`` over the samples that have a verdict (None: a scorer that gives
    none); empty when no sample has one. An unknown verdict is an error naming the known ones."""
    counts = Counter(v for v in verdicts if v is not None)
    unknown = sorted(set(counts) - set(VERDICTS))
    if unknown:
        raise ValueError(f"unknown verdict(s) {unknown}; known: {list(VERDICTS)}")
    total = sum(counts.values())
    if not total:
        return {}
    return {METRIC_PREFIX + v: counts[v] / total for v in VERDICTS}
