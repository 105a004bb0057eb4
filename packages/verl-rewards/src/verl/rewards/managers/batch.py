"""``batch``: the scorer gets the whole batch as lists and returns one result per row.

A user scorer is called as ``compute_score(data_sources=[...], solution_strs=[...],
ground_truths=[...], extra_infos=[...], **kwargs)``. Without one, rows go through
`default_compute_score` on a thread pool (useful for code rows waiting on sandboxes).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from verl.rewards.managers.base import RewardManagerBase, Row, Scored


class BatchRewardManager(RewardManagerBase):
    def __init__(
        self,
        tokenizer,
        num_examine,
        compute_score: Callable[..., Any] | None = None,
        reward_fn_key="data_source",
        max_workers: int = 8,
        **kwargs,
    ):
        self.batched_user_fn = compute_score
        self.max_workers = int(max_workers)
        super().__init__(tokenizer, num_examine, None, reward_fn_key, **kwargs)

    def _extra_option_names(self) -> str:
        return ", max_workers"

    def score_rows(self, rows: list[Row]) -> Scored:
        errors: list[str] = []
        if self.batched_user_fn is None:
            with ThreadPoolExecutor(max(1, min(self.max_workers, len(rows)))) as ex:
                results = list(ex.map(lambda r: self.score_one(r, errors), rows))
        else:
            results = self._call_user(rows, errors)
        scored = self.collect([self.split_result(res, row) for res, row in zip(results, rows)])
        if self.count_errors_as_zero:
            scored.metrics["reward/score_errors"] = float(len(errors))
        return scored

    def _call_user(self, rows: list[Row], errors: list[str]) -> list:
        sources = sorted({r.data_source for r in rows})
        try:
            results = list(
                self.batched_user_fn(
                    data_sources=[r.data_source for r in rows],
                    solution_strs=[r.response for r in rows],
                    ground_truths=[r.ground_truth for r in rows],
                    extra_infos=[r.extra_info for r in rows],
                    **self.score_kwargs,
                )
            )
        except Exception as e:
            if not self.count_errors_as_zero:
                raise RuntimeError(
                    f"batch reward scorer failed on rows 0..{len(rows) - 1} (data sources {sources}): {type(e).__name__}: {e}"
                ) from e
            errors.extend(f"row {r.index} ({r.data_source}): {type(e).__name__}: {e}" for r in rows)
            return [0.0] * len(rows)
        if len(results) != len(rows):
            raise ValueError(f"batch reward scorer returned {len(results)} results for {len(rows)} rows")
        return results
