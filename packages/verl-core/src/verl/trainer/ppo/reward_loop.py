"""The reward loop: score samples while the rest of the batch is still generating.

Upstream verl calls this the reward loop (``reward_model.use_reward_loop``; our key is
``reward.use_reward_loop``). Without it, the reward stage scores the whole batch in one pass after
generation. With it, the generation stage (``StagesMixin.stage_gen``) generates the step's prompts in
``reward.reward_loop_chunks`` chunks of whole groups and hands each chunk to a `RewardLoop` the moment
it is generated; the loop scores that chunk's samples, one part per sample, on a pool of
``reward.num_workers`` driver threads while the next chunk generates. The reward stage then waits for
what is left and puts the parts together (``RewardLoop.result``).

Threads suit every scorer we have: the sandboxed code scorer waits on subprocesses, the ``prime``
manager on its worker processes, a judge on HTTP, all without the GIL. Rule scorers in pure Python
hold the GIL but still overlap the rollout, which runs in the workers' processes.

A reward function takes part when it is a `SampleScorer` (verl-rewards' managers are): it scores any
part of a batch on its own (``score_part``, called from several threads at once) and assembles the
parts into exactly what one pass over the whole batch returns (``assemble``), so a sample's score does
not depend on how the batch was split.
"""

from __future__ import annotations

import itertools
import threading
from abc import ABC, abstractmethod
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from verl.protocol import DataProto

__all__ = ["RewardLoop", "SampleScorer", "chunk_bounds"]


class SampleScorer(ABC):
    """A reward function ``fn(data, return_dict=True)`` whose rows can also be scored apart."""

    @abstractmethod
    def score_part(self, data: DataProto, first_row: int = 0) -> Any:
        """Score the rows of ``data``, rows ``first_row, first_row + 1, ...`` of a batch (for messages);
        must be safe to call from several threads."""

    @abstractmethod
    def assemble(self, data: DataProto, parts: list[Any]) -> dict:
        """``fn(data, return_dict=True)``'s result from the parts of ``data``, whose rows are the parts'
        rows in order."""


class RewardLoop:
    """Scores the samples of a step's chunks on ``num_workers`` threads as the chunks are generated.

    One step: ``start()``, then ``submit(chunk, k)`` per generated chunk (each row becomes its own
    part), then ``result(batch)`` with the batch whose rows are the submitted chunks' rows, in order.
    ``trace`` records the step's ``(event, chunk)`` in the order they happened: ``gen_start``,
    ``gen_end`` (the trainer's, via `record`), ``score_start`` (the chunk's first part began scoring) and
    ``score_end`` (its last part finished).
    """

    def __init__(self, scorer: SampleScorer, num_workers: int):
        if not isinstance(scorer, SampleScorer):
            raise TypeError(
                f"reward.use_reward_loop=true needs a reward function that scores samples apart (a "
                f"verl.trainer.ppo.reward_loop.SampleScorer, as verl-rewards' managers are); got "
                f"{scorer!r}. Set reward.use_reward_loop=false to score the batch in one pass"
            )
        if num_workers < 1:
            raise ValueError(f"reward.num_workers={num_workers} must be >= 1")
        self.scorer = scorer
        self.num_workers = int(num_workers)
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self._parts: list[Future] = []
        self._uids: list[Any] = []
        self._pending: dict[int, int] = {}  # chunk -> parts not finished
        self._started: set[int] = set()
        self.trace: list[tuple[str, int]] = []

    @property
    def active(self) -> bool:
        """Whether parts were submitted since `start` and not yet collected by `result`."""
        return bool(self._parts)

    def start(self) -> None:
        """Begin a step (a generation round): forget the last one's parts and trace."""
        if self.active:
            raise RuntimeError(
                f"reward loop: {len(self._parts)} scored samples of the last generation round were never "
                "collected; the reward stage (RewardLoop.result) must run after every generation stage"
            )
        self.trace = []
        self._uids = []
        self._pending = {}
        self._started = set()

    def record(self, event: str, chunk: int) -> None:
        with self._lock:
            self.trace.append((event, chunk))

    def submit(self, chunk: DataProto, index: int) -> None:
        """Score every row of ``chunk`` (chunk number ``index``) in the pool, one part per row."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.num_workers, thread_name_prefix="reward_loop")
        uids = chunk.non_tensor_batch.get("uid")
        self._uids.extend(uids.tolist() if uids is not None else [None] * len(chunk))
        with self._lock:
            self._pending[index] = len(chunk)
        for i in range(len(chunk)):
            row = len(self._parts)  # its row in the batch the reward stage gets
            self._parts.append(self._pool.submit(self._score, chunk.slice(i, i + 1), row, index))

    def _score(self, data: DataProto, row: int, index: int) -> Any:
        with self._lock:
            if index not in self._started:
                self._started.add(index)
                self.trace.append(("score_start", index))
        part = self.scorer.score_part(data, row)
        with self._lock:
            self._pending[index] -= 1
            if not self._pending[index]:
                self.trace.append(("score_end", index))
        return part

    def result(self, batch: DataProto) -> dict:
        """Wait for every part and assemble them over ``batch`` (the submitted rows, in order): the
        reward function's ``return_dict`` result. A scorer's error is raised here."""
        parts, self._parts = self._parts, []
        if len(parts) != len(batch):
            raise ValueError(
                f"reward loop: {len(parts)} samples were scored during generation but the reward stage got "
                f"{len(batch)} rows; a stage between gen and reward must not add or drop rows"
            )
        uids = batch.non_tensor_batch.get("uid")
        if uids is not None and uids.tolist() != self._uids:
            raise ValueError(
                "reward loop: the reward stage's rows are not the generated rows in generation order (their "
                "uids differ); a stage between gen and reward must not reorder rows"
            )
        return self.scorer.assemble(batch, [p.result() for p in parts])

    def overlapped_chunks(self) -> int:
        """How many chunks began scoring before the last chunk finished generating (this step's trace)."""
        last_gen = max((i for i, (event, _) in enumerate(self.trace) if event == "gen_end"), default=-1)
        return len({k for i, (event, k) in enumerate(self.trace) if event == "score_start" and i < last_gen})

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None


def chunk_bounds(num_groups: int, group_size: int, chunks: int) -> list[tuple[int, int]]:
    """Row ranges of ``chunks`` near-equal chunks of whole groups (the first ones one group larger);
    fewer when there are fewer groups than chunks."""
    k = max(1, min(chunks, num_groups))
    sizes = [num_groups // k + (1 if i < num_groups % k else 0) for i in range(k)]
    ends = list(itertools.accumulate(sizes))
    return [((end - size) * group_size, end * group_size) for size, end in zip(sizes, ends)]
