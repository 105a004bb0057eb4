"""``dapo``: per-row scores plus DAPO's overlong-buffer length penalty.

With ``overlong_buffer.enable``, a response longer than ``max_resp_len - overlong_buffer.len`` tokens
is penalized linearly, reaching ``-penalty_factor`` at ``max_resp_len``:
``penalty = min(-(length - (max_resp_len - len)) / len * penalty_factor, 0)``, added to the score.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from verl.rewards.managers.base import Row, Scored
from verl.rewards.managers.naive import NaiveRewardManager


class DAPORewardManager(NaiveRewardManager):
    def __init__(
        self,
        tokenizer,
        num_examine,
        compute_score=None,
        reward_fn_key="data_source",
        max_resp_len: int | None = None,
        overlong_buffer: Mapping[str, Any] | None = None,
        overlong_buffer_cfg: Mapping[str, Any] | None = None,  # upstream's name for the same thing
        **kwargs,
    ):
        super().__init__(tokenizer, num_examine, compute_score, reward_fn_key, **kwargs)
        cfg = dict(overlong_buffer or overlong_buffer_cfg or {})
        self.overlong_enable = bool(cfg.get("enable", False))
        self.overlong_len = int(cfg.get("len", 0))
        self.penalty_factor = float(cfg.get("penalty_factor", 1.0))
        self.overlong_log = bool(cfg.get("log", True))
        self.max_resp_len = max_resp_len
        if self.overlong_enable:
            if max_resp_len is None:
                raise ValueError(
                    "dapo reward manager: overlong_buffer.enable=true needs max_resp_len (the rollout response length)"
                )
            if not 0 < self.overlong_len <= max_resp_len:
                raise ValueError(
                    f"dapo reward manager: overlong_buffer.len={self.overlong_len} must be in (0, max_resp_len={max_resp_len}]"
                )

    def _extra_option_names(self) -> str:
        return ", max_resp_len, overlong_buffer"

    def overlong_penalty(self, length: int) -> float:
        expected = self.max_resp_len - self.overlong_len
        return min(-(length - expected) / self.overlong_len * self.penalty_factor, 0.0)

    def score_rows(self, rows: list[Row]) -> Scored:
        scored = super().score_rows(rows)
        if self.overlong_enable:
            penalties = [self.overlong_penalty(r.valid_response_length) for r in rows]
            scored.scores = [s + p for s, p in zip(scored.scores, penalties)]
            if self.overlong_log:
                scored.extra["overlong_reward"] = penalties
                scored.extra["overlong"] = [p < 0 for p in penalties]
        return scored
