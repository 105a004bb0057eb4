"""``prime``: rows scored in parallel worker processes, each with a per-row time limit.

A row that exceeds ``timeout`` seconds scores 0 with verdict ``timeout`` (counted in
``reward/score_timeouts``); its worker
is killed and replaced, so one pathological row cannot hold the batch. Workers are plain helper
processes (`verl.rewards.utils.time_limit`), safe to use from Ray actors and threads.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from verl.rewards.managers.base import RewardManagerBase, Row, Scored
from verl.rewards.utils.time_limit import TimeLimiter


class PrimeRewardManager(RewardManagerBase):
    def __init__(
        self,
        tokenizer,
        num_examine,
        compute_score=None,
        reward_fn_key="data_source",
        num_processes: int = 4,
        timeout: float = 300.0,
        **kwargs,
    ):
        super().__init__(tokenizer, num_examine, compute_score, reward_fn_key, **kwargs)
        self.timeout = float(timeout)
        self.num_processes = int(num_processes)
        self.limiter = TimeLimiter(max_workers=self.num_processes, preload=("verl.rewards.scoring",))

    def _extra_option_names(self) -> str:
        return ", num_processes, timeout"

    def _score_in_worker(self, row: Row, errors: list[str], timeouts: list[int]) -> float | dict:
        try:
            return self.limiter.call(
                self.compute_score,
                timeout=self.timeout,
                data_source=row.data_source,
                solution_str=row.response,
                ground_truth=row.ground_truth,
                extra_info=row.extra_info,
                **self.score_kwargs,
            )
        except TimeoutError:
            timeouts.append(row.index)
            return {"score": 0.0, "verdict": "timeout"}
        except Exception as e:
            if not self.count_errors_as_zero:
                raise RuntimeError(
                    f"reward scorer failed on row {row.index} (data_source={row.data_source!r}): {type(e).__name__}: {e}"
                ) from e
            errors.append(f"row {row.index}: {e}")
            return 0.0

    def score_rows(self, rows: list[Row]) -> Scored:
        errors: list[str] = []
        timeouts: list[int] = []
        with ThreadPoolExecutor(max(1, min(self.num_processes, len(rows)))) as ex:
            results = list(ex.map(lambda r: self._score_in_worker(r, errors, timeouts), rows))
        scored = self.collect([self.split_result(res, row) for res, row in zip(results, rows)])
        scored.metrics["reward/score_timeouts"] = float(len(timeouts))
        if self.count_errors_as_zero:
            scored.metrics["reward/score_errors"] = float(len(errors))
        return scored

    def close(self) -> None:
        self.limiter.close()
