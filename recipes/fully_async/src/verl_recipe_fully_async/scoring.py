"""Scoring off the rollouter's thread, for rewards that take time: a reward model on a pool of its own
(``reward.reward_model``, core's ``RewardModelWorker``) or a generative judge behind an HTTP endpoint
(``reward.reward_kwargs.judge``). The rollouter hands each finished sample over and goes straight back
to generating; one scoring thread takes every sample waiting, scores them together in one call of the
trainer's reward stage (the reward model's forward pass, then the rule reward and the judge), and
queues each as a `Sample`. So samples are scored as they arrive, batched only by what arrived while
the previous call ran, and generation never waits for the reward model.

A checkpoint waits for the samples being scored (`ScoringPipeline.drain`), so they are in the saved
queue; a failure stops the run with the scorer's error.
"""

from __future__ import annotations

import queue
import threading
from typing import Any

from verl import DataProto

from verl_recipe_fully_async.message_queue import Coordinator, Stopped, concat_samples

_STOP = object()


class ScoringPipeline:
    """``score(batch) -> batch`` (the trainer's ``stage_reward``) on a thread of its own; each sample's
    rows stay together and come back as ``make_sample(rows, index)`` into ``coord``."""

    def __init__(self, score, make_sample, coord: Coordinator, pad_token_id: int):
        self.score = score
        self.make_sample = make_sample
        self.coord = coord
        self.pad_token_id = pad_token_id
        self._in: queue.Queue = queue.Queue()
        self._busy = 0  # samples handed over and not queued yet
        self._cond = threading.Condition()
        #: samples per scoring call so far (how the arrivals batched)
        self.call_sizes: list[int] = []
        self._thread = threading.Thread(target=self._run, name="scorer", daemon=True)
        self._thread.start()

    def submit(self, data: DataProto, index: int) -> None:
        with self._cond:
            self._busy += 1
        self._in.put((data, index))

    def drain(self) -> None:
        """Wait until every sample handed over is queued (or the run stopped)."""
        with self._cond:
            while self._busy and not self.coord.stopped:
                self._cond.wait(0.05)
        self.coord.raise_if_stopped()

    def close(self) -> None:
        self._in.put(_STOP)
        self._thread.join()

    def _take(self) -> list[tuple[DataProto, int]] | None:
        first = self._in.get()
        items = [first]
        while True:
            try:
                items.append(self._in.get_nowait())
            except queue.Empty:
                break
        if any(item is _STOP for item in items):
            return None
        return items

    def _run(self) -> None:
        try:
            while (items := self._take()) is not None:
                self._score_and_queue(items)
        except Stopped:
            return
        except BaseException as e:  # the trainer re-raises it from its next wait
            self.coord.stop(e)

    def _score_and_queue(self, items: list[tuple[DataProto, Any]]) -> None:
        sizes = [len(d) for d, _ in items]
        scored = self.score(concat_samples([d for d, _ in items], self.pad_token_id))
        self.call_sizes.append(len(items))
        start = 0
        for (_, index), n in zip(items, sizes):
            sample = self.make_sample(scored.slice(start, start + n), index)
            start += n
            if not self.coord.put(sample):
                raise RuntimeError(
                    "the sample queue is full while a weight sync waits; the staleness bound should make "
                    "this impossible"
                )
            with self._cond:
                self._busy -= 1
                self._cond.notify_all()


__all__ = ["ScoringPipeline"]
