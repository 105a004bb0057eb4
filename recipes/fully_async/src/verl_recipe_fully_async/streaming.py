"""`StreamingRollouter`: the rollouter for an engine that takes requests one by one (vLLM's async
engine on the rollout pool, ``stream_worker``), as upstream's fully-async rollouter does.

Prompts are submitted as they are drawn: whenever the staleness bound admits samples and fewer than
``data.gen_batch_size`` prompts are in flight, the next ones go to the least loaded rollout rank, each
as ``rollout.n`` requests that vLLM batches continuously with the rest. Each sample is scored and queued
the moment its last request finishes (streaming sample by sample, not in blocks), so a long response
holds up only its own sample.

Weight syncs. With ``partial_rollout`` the requests in flight are aborted at the sync, keep what they
generated, and continue under the new weights once they are loaded (the engine reports each token's
weights version: ``token_versions``); without, a pending sync lets them finish and admits nothing new.
The staleness bound is the `Coordinator`'s, counted as upstream counts it: every sample started and not
yet consumed counts against the next window, a resumed sample is not started again. Samples may finish
out of order, so with partial rollouts a long one can span more than one sync (upstream's
``max_partial_span``); at most ``floor(s W)`` stale samples per window holds regardless.

Rollout-pool busy time is the wall time during which requests are in flight (plus weight loads while
none are); a checkpoint drops the samples in flight (counted) and generates their prompts again after
a resume, as with waves.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

import numpy as np
from verl import DataProto

from verl_recipe_fully_async.rollouter import _PROMPT_TENSORS, Rollouter


@dataclass
class InFlight:
    """One sample on the rollout pool."""

    prompt: DataProto  # its prompt row as drawn (for a checkpoint)
    rows: DataProto  # its rollout.n rows' non-tensors, uid included (for scoring)
    rank: int


class StreamingRollouter(Rollouter):
    """See the module doc. ``poll_s``: how long one poll of the pool waits for a first finished sample
    (the rollouter checks for weight syncs and admits new prompts between polls)."""

    def __init__(self, trainer, coord, rollout_wg, poll_s: float = 0.05):
        super().__init__(trainer, coord, rollout_wg)
        self.in_flight: dict[int, InFlight] = {}
        self.max_in_flight = self.wave_prompts
        self.poll_s = float(poll_s)
        self._busy_since: float | None = None

    def _loop(self) -> None:
        self.wg.resume_generation(self.coord.rollout_version)  # the engine tags tokens with it
        while True:
            self.coord.raise_if_stopped()
            self._serve_sync()
            submitted = self._submit()
            if self.in_flight:
                self._poll()
            elif not submitted:
                self.coord.wait_for_work()

    # ------------------------------------------------------------------ busy time
    def _call(self, fn, *args):
        if self.in_flight:  # the in-flight clock is running
            return fn(*args)
        return super()._call(fn, *args)

    def _clock(self, was_busy: bool) -> None:
        now = time.perf_counter()
        if not was_busy and self.in_flight:
            self._busy_since = now
        elif was_busy and not self.in_flight:
            self.busy_s += now - self._busy_since

    # ------------------------------------------------------------------ requests
    def _submit(self) -> int:
        room = self.max_in_flight - len(self.in_flight)
        k = self.coord.admit(room) if room > 0 else 0
        if k == 0:
            return 0
        prompts = self._take_prompts(k)
        indices = list(range(self.next_index, self.next_index + k))
        self.next_index += k
        load = [0] * self.wg.world_size
        for entry in self.in_flight.values():
            load[entry.rank] += 1
        ranks = []
        for _ in indices:
            rank = int(np.argmin(load))
            load[rank] += 1
            ranks.append(rank)
        batch = DataProto(batch=prompts.batch, non_tensor_batch=dict(prompts.non_tensor_batch), meta_info={})
        batch.non_tensor_batch["uid"] = np.array([str(uuid.uuid4()) for _ in range(k)], dtype=object)
        batch = batch.repeat(repeat_times=self.n, interleave=True)
        gen = self.trainer.rollout_input(batch, do_sample=self.do_sample, validate=False)
        gen.meta_info["temperature"] = self.temperature
        gen.non_tensor_batch["sample_index"] = np.repeat(np.array(indices, dtype=np.int64), self.n)
        row_rank = np.repeat(np.array(ranks), self.n)
        share = [
            gen.select_idxs(np.nonzero(row_rank == r)[0]) if (row_rank == r).any() else None
            for r in range(self.wg.world_size)
        ]
        rows = batch
        rows.pop(batch_keys=list(_PROMPT_TENSORS))  # the rollout's output brings them back, with responses
        was_busy = bool(self.in_flight)
        self._call(self.wg.submit_samples, share)
        for j, (index, rank) in enumerate(zip(indices, ranks)):
            self.in_flight[index] = InFlight(
                prompts.slice(j, j + 1), rows.slice(j * self.n, (j + 1) * self.n), rank
            )
        self._clock(was_busy)
        return k

    def _poll(self) -> None:
        for finished in self.wg.poll_samples(self.poll_s):
            for index, gen in finished:
                entry = self.in_flight.pop(int(index))
                self._queue(gen, entry.rows, int(index))
        self._clock(True)

    # ------------------------------------------------------------------ weight syncs
    def _idle(self) -> bool:
        return not self.in_flight

    def _pause(self) -> bool:
        if not self.in_flight:
            return False
        self.wg.pause_generation()
        return True

    def _resume(self, version: int, paused: bool) -> None:
        self.wg.resume_generation(version)  # also when nothing was paused: new requests use it

    # ------------------------------------------------------------------ checkpoints
    def _unfinished_prompts(self) -> list[DataProto]:
        return [self.in_flight[i].prompt for i in sorted(self.in_flight)]


__all__ = ["InFlight", "StreamingRollouter"]
