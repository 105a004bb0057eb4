"""PRIME's online prompt filter: an accuracy band with oversampling (upstream's ``filter_and_downsample``).

Each step generates ``data.oversample_factor`` times the prompts it trains on (the loader serves
``data.gen_batch_size = train_batch_size * oversample_factor`` prompts). A *group* is the ``rollout.n``
answers to one prompt (rows sharing a ``uid``); its accuracy is the mean outcome label. A group passes when

- ``data.filter_accuracy``: ``accuracy_lower_bound <= accuracy <= accuracy_upper_bound`` (too easy and too
  hard prompts teach little), and
- ``data.filter_truncate``: its longest answer is shorter than ``max_response_length - 1`` tokens.

Passing groups come first, then the others, each in arrival order; the first ``keep_groups`` groups are
trained on. So a step never runs short: when fewer groups pass, failing ones fill the batch (upstream's
"prioritised", not DAPO's "resample until full"). Upstream sorts with a non-stable argsort; here the order
within each class is the arrival order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


@dataclass(frozen=True)
class FilterResult:
    rows: np.ndarray  # row indices to keep, whole groups, passing groups first
    groups: int  # groups generated
    passed: int  # groups that passed the filter
    kept: int  # groups kept (keep_groups)
    kept_failing: int  # kept groups that did not pass (filled in because too few passed)

    def metrics(self, prefix: str = "prime") -> dict[str, float]:
        return {
            f"{prefix}/groups": float(self.groups),
            f"{prefix}/passed_groups": float(self.passed),
            f"{prefix}/passed_group_ratio": self.passed / self.groups if self.groups else float("nan"),
            f"{prefix}/kept_failing_groups": float(self.kept_failing),
        }


def accuracy_band_filter(
    index: np.ndarray,
    acc: torch.Tensor,
    keep_groups: int,
    *,
    filter_accuracy: bool,
    lower: float,
    upper: float,
    response_lengths: torch.Tensor | None = None,
    filter_truncate: bool = False,
    max_response_length: int | None = None,
) -> FilterResult:
    """Choose ``keep_groups`` whole groups of a scored batch (see the module doc).

    ``index``: the uid of each row; ``acc``: each row's outcome label; ``response_lengths``: each row's
    response length in tokens (needed with ``filter_truncate``).
    """
    if len(index) != len(acc):
        raise ValueError(f"{len(index)} uids but {len(acc)} outcome labels")
    if filter_truncate and (response_lengths is None or max_response_length is None):
        raise ValueError("filter_truncate needs response_lengths and max_response_length")
    order: dict = {}
    for i, uid in enumerate(index):
        order.setdefault(uid, []).append(i)
    if keep_groups > len(order):
        raise ValueError(
            f"asked to keep {keep_groups} groups but the batch has {len(order)} (data.gen_batch_size too small "
            f"for data.train_batch_size?)"
        )
    passed, failed = [], []
    labels = acc.double()
    for uid, rows in order.items():
        ok = True
        if filter_accuracy:
            mean = float(labels[rows].mean())
            ok = lower <= mean <= upper
        if ok and filter_truncate:
            ok = int(response_lengths[rows].max()) < int(max_response_length) - 1
        (passed if ok else failed).append(uid)
    chosen = (passed + failed)[:keep_groups]
    rows = np.array([i for uid in chosen for i in order[uid]], dtype=np.int64)
    return FilterResult(
        rows=rows,
        groups=len(order),
        passed=len(passed),
        kept=len(chosen),
        kept_failing=max(0, len(chosen) - len(passed)),
    )
