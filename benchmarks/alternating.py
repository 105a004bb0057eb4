"""The measuring loop the comparison benchmarks share (plain Python: it also runs under other venvs)."""

from __future__ import annotations

import sys
from typing import Any


def alternate(
    sides: dict[str, Any], rows: list[str], rounds: int, reps: int
) -> dict[str, dict[str, list[float]]]:
    """``{side: {row: [time per round]}}``: every round times each row on every side back to back,
    alternating which side goes first, so load drift on a shared machine hits all sides alike (ratios
    are then taken per round). A side is anything with ``time(row, reps) -> seconds``."""
    times: dict[str, dict[str, list[float]]] = {name: {row: [] for row in rows} for name in sides}
    order = list(sides)
    for r in range(rounds):
        for row in rows:
            for name in order if r % 2 == 0 else order[::-1]:
                times[name][row].append(sides[name].time(row, reps))
        print(f"round {r + 1}/{rounds} done", file=sys.stderr)
    return times
