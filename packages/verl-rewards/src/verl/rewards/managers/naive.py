"""``naive``: score each row in turn."""

from __future__ import annotations

from verl.rewards.managers.base import RewardManagerBase, Row, Scored


class NaiveRewardManager(RewardManagerBase):
    def score_rows(self, rows: list[Row]) -> Scored:
        errors: list[str] = []
        scored = self.collect([self.split_result(self.score_one(row, errors), row) for row in rows])
        if self.count_errors_as_zero:
            scored.metrics["reward/score_errors"] = float(len(errors))
        return scored
