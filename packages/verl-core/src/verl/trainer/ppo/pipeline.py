"""The training step as data: an ordered list of named, timed stages.

A stage is ``run(batch, metrics) -> batch | None``: it takes the step's ``DataProto``, adds to it (or
returns a new one) and writes its metrics into ``metrics``. ``None`` means "this is not a training
batch yet": the step ends there and the trainer fetches the next prompt batch (dynamic sampling).
Every stage is timed as ``timing_s/<name>``; a stage with a ``when`` predicate (validation every
``test_freq`` steps, a checkpoint every ``save_freq``) is skipped, untimed, on the steps it returns False.

A stage may *overlap*: ``Stage(name, run, joined_before="adv")`` starts in a driver thread on a
shallow snapshot of the batch, the stages after it run meanwhile, and it is joined right before the
stage named by ``joined_before`` (the wait is timed as ``timing_s/<name>_wait``). An overlapping
stage may only add keys (tensors, non-tensors, meta) to the batch; they are copied onto the batch at
the join. Stages that read its output must come after the join point.

Recipes change the step by name, never by position::

    pipeline.insert_before("adv", Stage("prm", self.stage_prm))   # a new stage
    pipeline.replace("filter", self.accuracy_filter)                # another body, same name and place
    pipeline.wrap("gen", lambda inner: refreshed(inner))            # code around a stage
    pipeline.remove("values")
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

from verl.protocol import DataProto
from verl.trainer.ppo.metric_utils import marked_timer

__all__ = ["Pipeline", "Stage", "StageFn"]

StageFn = Callable[[DataProto, dict], "DataProto | None"]


@dataclass(frozen=True)
class Stage:
    """One named step of the pipeline (see the module doc).

    Args:
        name: the stage's public name, also its timing key (``timing_s/<name>``).
        run: ``run(batch, metrics) -> batch | None``.
        joined_before: set for an overlapping stage: the name of the later stage it is joined before.
        when: ``when() -> bool``, asked each step; the stage runs only when it returns True.
    """

    name: str
    run: StageFn
    joined_before: str | None = None
    when: Callable[[], bool] | None = None


class Pipeline:
    """An ordered list of uniquely named stages, edited by name and run once per step."""

    def __init__(self, stages: Iterable[Stage]):
        self._stages: list[Stage] = list(stages)
        self._check()

    # ----------------------------------------------------------------------------- inspection
    @property
    def names(self) -> list[str]:
        return [s.name for s in self._stages]

    def __iter__(self) -> Iterator[Stage]:
        return iter(list(self._stages))

    def __len__(self) -> int:
        return len(self._stages)

    def __contains__(self, name: object) -> bool:
        return name in self.names

    def __getitem__(self, name: str) -> Stage:
        return self._stages[self._index(name)]

    def __repr__(self) -> str:
        parts = [s.name + (f"~>{s.joined_before}" if s.joined_before else "") for s in self._stages]
        return f"Pipeline({' -> '.join(parts)})"

    # -------------------------------------------------------------------------------- editing
    def insert_before(self, name: str, stage: Stage) -> Pipeline:
        """Put ``stage`` right before the stage called ``name``."""
        self._stages.insert(self._index(name), stage)
        return self._check()

    def insert_after(self, name: str, stage: Stage) -> Pipeline:
        """Put ``stage`` right after the stage called ``name``."""
        self._stages.insert(self._index(name) + 1, stage)
        return self._check()

    def replace(self, name: str, run: StageFn) -> Pipeline:
        """Give the stage called ``name`` another body; its place, name, overlap and ``when`` stay."""
        i = self._index(name)
        self._stages[i] = replace(self._stages[i], run=run)
        return self

    def wrap(self, name: str, wrapper: Callable[[StageFn], StageFn]) -> Pipeline:
        """Replace the stage's body by ``wrapper(body)``: code before and after the stage it wraps."""
        return self.replace(name, wrapper(self[name].run))

    def remove(self, name: str) -> Pipeline:
        del self._stages[self._index(name)]
        return self._check()

    def starting_at(self, name: str) -> Pipeline:
        """A new pipeline of the stages from ``name`` to the end (a loop that makes its batches itself)."""
        return Pipeline(self._stages[self._index(name):])

    # -------------------------------------------------------------------------------- running
    def run(self, batch: DataProto, metrics: dict, timing_raw: dict[str, float]) -> DataProto | None:
        """Run every stage in order; returns the trained batch, or None when a stage asked for more data."""
        pending: dict[str, list[_Overlap]] = {}
        try:
            for stage in self._stages:
                for job in pending.pop(stage.name, []):
                    with marked_timer(f"{job.name}_wait", timing_raw):
                        batch = job.join(batch, metrics)
                if stage.when is not None and not stage.when():
                    continue
                if stage.joined_before is not None:
                    pending.setdefault(stage.joined_before, []).append(_Overlap(stage, batch, timing_raw))
                    continue
                with marked_timer(stage.name, timing_raw):
                    batch = stage.run(batch, metrics)
                if batch is None:
                    return None
            return batch
        finally:
            for jobs in pending.values():  # a stage ended the step before the join: wait, keep nothing
                for job in jobs:
                    job.future.exception()

    # ------------------------------------------------------------------------------- internals
    def _index(self, name: str) -> int:
        for i, stage in enumerate(self._stages):
            if stage.name == name:
                return i
        raise KeyError(f"no stage {name!r} in the pipeline; stages: {', '.join(self.names) or '(none)'}")

    def _check(self) -> Pipeline:
        names = self.names
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"stage names must be unique; {dup} appear more than once in {names}")
        for i, stage in enumerate(self._stages):
            if not callable(stage.run):
                raise TypeError(f"stage {stage.name!r}: run must be callable, got {stage.run!r}")
            join = stage.joined_before
            if join is not None and join not in names[i + 1 :]:
                raise ValueError(
                    f"overlapping stage {stage.name!r} is joined before {join!r}, which is not a later stage; "
                    f"stages after it: {names[i + 1:]}"
                )
        return self


class _Overlap:
    """A stage running in a driver thread on a snapshot of the batch (see the module doc)."""

    def __init__(self, stage: Stage, batch: DataProto, timing_raw: dict[str, float]):
        self.name = stage.name
        # A shallow snapshot: the main thread keeps adding keys to its batch meanwhile.
        self._snapshot = DataProto(
            batch=copy.copy(batch.batch), non_tensor_batch=dict(batch.non_tensor_batch), meta_info=dict(batch.meta_info)
        )
        self._meta_before = dict(batch.meta_info)
        self._metrics: dict[str, Any] = {}

        def work() -> DataProto | None:
            with marked_timer(stage.name, timing_raw):
                return stage.run(self._snapshot, self._metrics)

        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=stage.name)
        self.future: Future = pool.submit(work)
        pool.shutdown(wait=False)  # the thread ends with its one task

    def join(self, target: DataProto, metrics: dict) -> DataProto:
        """Wait (re-raising the stage's error here, in the step) and add what the stage added."""
        out = self.future.result()
        if out is None or len(out) != len(target):
            raise ValueError(
                f"overlapping stage {self.name!r} must return the batch it was given with keys added, not "
                f"{'None' if out is None else f'{len(out)} rows for {len(target)}'}; a stage that drops rows "
                "cannot overlap"
            )
        for key in out.batch.keys() - target.batch.keys():
            target.batch[key] = out.batch[key]
        for key in out.non_tensor_batch.keys() - target.non_tensor_batch.keys():
            target.non_tensor_batch[key] = out.non_tensor_batch[key]
        for key, value in out.meta_info.items():
            if key not in self._meta_before or self._meta_before[key] is not value:
                target.meta_info[key] = value
        metrics.update(self._metrics)
        return target
