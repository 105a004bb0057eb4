"""The hand-off between the rollouter and the trainer: samples, the bounded queue, the staleness bound,
the weight-sync handshake, and who waited how long. Plain threads and one condition variable: no Ray,
no workers, so every rule here is unit-tested on its own (tests/test_message_queue.py).

Policy versions. The trainer's weights start at version 0 and every weight sync it triggers publishes
version V+1; the rollouter's version is the last one it loaded. A *sample* is one prompt's ``rollout.n``
trajectories; its ``version`` is the rollouter's version when its generation started (the oldest
weights in it), ``end_version`` the version of its last tokens (larger only when a partial rollout
spanned a sync). A sample the trainer consumes at version V is *stale* when ``version < V``.

The staleness bound (upstream's ``async_training.staleness_threshold`` = s). The trainer consumes W =
``trigger_parameter_sync_step * require_batches * ppo_mini_batch_size`` samples per version. The
rollouter may start sample number i (counting from 0) only while ``i < (v + 1) * W + floor(s * W)``
with v its loaded version, i.e. at most ``(1 + s) W`` samples per version minus what it ran ahead
before (upstream's ``rollout_num``). Every sample consumed before window V was started before sync V
(version <= V - 1), so at most ``floor(s W)`` samples of version < V remain for window V: **at most
``floor(s W)`` stale samples per window**. With s <= 1, and samples finishing in the order their waves
started (one wave in flight at a time), a sample is never more than one version old. s = 0 is on-policy
training; s = 1 with whole-batch waves is one-step-off.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Sample:
    """One prompt's ``rollout.n`` trajectories (a scored DataProto) and the versions that produced it."""

    data: Any
    version: int
    end_version: int
    index: int  # order in which samples were started (0, 1, ...), for bookkeeping and tests

    @property
    def partial(self) -> bool:
        """Generated across at least one weight sync (partial rollout)."""
        return self.end_version > self.version


def sample_limit(version: int, samples_per_version: int, staleness_threshold: float) -> int:
    """How many samples may have been started in total while the rollouter holds ``version``."""
    return (version + 1) * samples_per_version + math.floor(staleness_threshold * samples_per_version)


class MessageQueue:
    """Bounded FIFO of samples. ``put`` blocks while full (back-pressure), ``get`` while empty; both
    give up when ``interrupt()`` turns true (checked whenever the shared condition is notified).

    Counts what passed through: ``total_put``, ``total_got``, ``stale_got`` (samples older than the
    consumer's version) and ``stale_trajectories_got`` (their rows). Not thread-safe on its own: the
    caller holds ``cond`` (the `Coordinator` does).
    """

    def __init__(self, capacity: int, cond: threading.Condition):
        if capacity < 1:
            raise ValueError(f"queue capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self.cond = cond
        self._items: deque[Sample] = deque()
        self.total_put = self.total_got = self.stale_got = self.stale_trajectories_got = 0

    def __len__(self) -> int:
        return len(self._items)

    def put(self, sample: Sample, interrupt=lambda: False) -> bool:
        """Append (waiting while full); False when interrupted before there was room. Hold ``cond``."""
        while len(self._items) >= self.capacity:
            if interrupt():
                return False
            self.cond.wait()
        self._items.append(sample)
        self.total_put += 1
        self.cond.notify_all()
        return True

    def get(self, consumer_version: int, interrupt=lambda: False) -> Sample | None:
        """Pop the oldest sample (waiting while empty); None when interrupted. Hold ``cond``."""
        while not self._items:
            if interrupt():
                return None
            self.cond.wait()
        sample = self._items.popleft()
        self.total_got += 1
        if sample.version < consumer_version:
            self.stale_got += 1
            self.stale_trajectories_got += len(sample.data)
        self.cond.notify_all()
        return sample

    def contents(self) -> list[Sample]:
        """The queued samples, oldest first (a copy of the list)."""
        return list(self._items)

    def restore(self, samples: list[Sample]) -> None:
        if len(samples) > self.capacity:
            raise ValueError(f"{len(samples)} saved samples do not fit the queue's capacity {self.capacity}")
        self._items = deque(samples)


@dataclass
class SyncRequest:
    """New trainer weights for the rollouter: ``payload`` says how to get them (object-store bucket refs,
    or None when the trainer is broadcasting them over the cross-pool group right now). With
    ``snapshot`` the rollouter hands back its state once loaded (for a checkpoint). ``started``: when
    the rollout pool began receiving it (when the rollouter took it, or earlier when it receives in the
    background; from then on the trainer's wait is the transfer itself)."""

    version: int
    payload: Any = None
    snapshot: bool = False
    posted: float = field(default_factory=time.perf_counter)
    started: float | None = None  # when the rollout pool began receiving
    done: threading.Event = field(default_factory=threading.Event)
    state: dict | None = None


class Stopped(RuntimeError):
    """The other side stopped (finished, or failed: then the failure is the cause)."""


class Coordinator:
    """Shared state of one asynchronous run (see the module doc for the rules it enforces).

    ``samples_per_version`` = W, ``staleness_threshold`` = s, ``total_samples``: the run's sample budget.
    Idle seconds are accumulated per side in ``idle`` (``rollouter``: waiting for the staleness bound, a
    sync or queue room; ``trainer``: waiting for samples).
    """

    def __init__(
        self,
        samples_per_version: int,
        staleness_threshold: float,
        total_samples: int,
        queue_capacity: int | None = None,
        version: int = 0,
        consumed: int = 0,
    ):
        if samples_per_version < 1:
            raise ValueError(f"samples_per_version must be >= 1, got {samples_per_version}")
        if not 0.0 <= staleness_threshold <= 1.0:
            raise ValueError(f"staleness_threshold must be in [0, 1], got {staleness_threshold}")
        self.W = samples_per_version
        self.s = float(staleness_threshold)
        self.total_samples = total_samples
        # enough room for everything the bound lets the rollouter run ahead: put never waits under it
        capacity = queue_capacity or self.W + math.floor(self.s * self.W)
        self.cond = threading.Condition()
        self.queue = MessageQueue(capacity, self.cond)
        self.rollout_version = self.trainer_version = version
        self.started = self.consumed = consumed
        self.idle = {"rollouter": 0.0, "trainer": 0.0}
        self._pending: SyncRequest | None = None
        self._stopped = False
        self._error: BaseException | None = None

    # ------------------------------------------------------------------ state
    def limit(self) -> int:
        return min(sample_limit(self.rollout_version, self.W, self.s), self.total_samples)

    def allowance(self) -> int:
        """Samples the rollouter may start now (0 while a sync is pending: no new work before it)."""
        if self._pending is not None:
            return 0
        return max(0, self.limit() - self.started)

    def stop(self, error: BaseException | None = None) -> None:
        with self.cond:
            self._stopped = True
            if error is not None and self._error is None:
                self._error = error
            if self._pending is not None:
                self._pending.done.set()
            self.cond.notify_all()

    @property
    def stopped(self) -> bool:
        return self._stopped

    @property
    def error(self) -> BaseException | None:
        return self._error

    def raise_if_stopped(self) -> None:
        """Raise `Stopped` (caused by the failure that stopped the run, if any) once the run stopped."""
        if self._stopped:
            why = f": {type(self._error).__name__}: {self._error}" if self._error is not None else ""
            raise Stopped(f"the asynchronous run stopped{why}") from self._error

    # ------------------------------------------------------------------ rollouter side
    def admit(self, want: int) -> int:
        """Start up to ``want`` samples now (no waiting); returns how many were admitted."""
        with self.cond:
            self.raise_if_stopped()
            n = min(int(want), self.allowance())
            self.started += n
            return n

    def wait_for_work(self) -> None:
        """Block until a sample may start, a sync is pending, or the run stops (rollouter idle time)."""
        t0 = time.perf_counter()
        with self.cond:
            while not (self._stopped or self._pending is not None or self.allowance() > 0):
                self.cond.wait()
            self.idle["rollouter"] += time.perf_counter() - t0
            self.raise_if_stopped()

    def put(self, sample: Sample) -> bool:
        """Queue a finished sample; False (not queued) if a sync became pending while the queue was full."""
        t0 = time.perf_counter()
        with self.cond:
            self.raise_if_stopped()
            ok = self.queue.put(sample, interrupt=lambda: self._stopped or self._pending is not None)
            self.idle["rollouter"] += time.perf_counter() - t0
            self.raise_if_stopped()
            return ok

    def sync_pending(self) -> bool:
        with self.cond:
            return self._pending is not None

    def pending_sync(self) -> SyncRequest | None:
        """The pending weight sync, if any (not marked as taken)."""
        with self.cond:
            return self._pending

    def mark_receiving(self, request: SyncRequest) -> None:
        """The rollout pool began receiving ``request``'s weights (before its safe point: overlapped)."""
        with self.cond:
            if request.started is None:
                request.started = time.perf_counter()

    def take_sync(self) -> SyncRequest | None:
        """The pending weight sync (marked as taken), or None."""
        with self.cond:
            request = self._pending
            if request is not None and request.started is None:
                request.started = time.perf_counter()
            return request

    def finish_sync(self, request: SyncRequest, snapshot: Callable[[], dict] | None = None) -> None:
        """The rollouter loaded ``request``'s weights; ``snapshot()`` (asked for by the request) reports
        its state, taken at the new version before anything else can change."""
        with self.cond:
            if self._pending is request:
                self._pending = None
            self.rollout_version = max(self.rollout_version, request.version)
            request.state = snapshot() if snapshot is not None else None
            request.done.set()
            self.cond.notify_all()

    # ------------------------------------------------------------------ trainer side
    def get(self, n: int) -> list[Sample]:
        """Take the next ``n`` samples (waiting for them: trainer idle time), counted at the trainer's version."""
        out: list[Sample] = []
        t0 = time.perf_counter()
        with self.cond:
            while len(out) < n:
                sample = self.queue.get(self.trainer_version, interrupt=lambda: self._stopped)
                if sample is None:
                    self.raise_if_stopped()
                out.append(sample)
            self.consumed += n
            self.idle["trainer"] += time.perf_counter() - t0
        return out

    def post_sync(self, request: SyncRequest) -> None:
        """Publish the trainer's next version. Versions are loaded in order: a request still pending is
        waited for first (the trainer can only get that far ahead with staleness_threshold = 1)."""
        with self.cond:
            while self._pending is not None and not self._stopped:
                self.cond.wait()
            self.raise_if_stopped()
            self.trainer_version = request.version
            self._pending = request
            self.cond.notify_all()

    def wait_synced(self, request: SyncRequest) -> dict | None:
        """Wait until the rollouter loaded ``request`` (or the run stopped); returns its reported state."""
        request.done.wait()
        with self.cond:
            self.raise_if_stopped()
        return request.state

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict:
        """Counters and queued samples (call at a sync point: the rollouter is between steps)."""
        with self.cond:
            return {
                "version": self.rollout_version,
                "consumed": self.consumed,
                "queue": self.queue.contents(),
                "counts": {
                    "total_put": self.queue.total_put,
                    "total_got": self.queue.total_got,
                    "stale_got": self.queue.stale_got,
                    "stale_trajectories_got": self.queue.stale_trajectories_got,
                },
            }

    def load_state_dict(self, state: dict) -> None:
        """Restore at the saved version: queued samples come back and count as started."""
        with self.cond:
            self.rollout_version = self.trainer_version = int(state["version"])
            self.consumed = int(state["consumed"])
            self.queue.restore(list(state["queue"]))
            self.started = self.consumed + len(self.queue)
            for key, value in state["counts"].items():
                setattr(self.queue, key, int(value))


#: Padding of the per-token bookkeeping past a sample's own responses: no decode segment, no weights version.
RESPONSE_FILL = {"token_segments": -1, "token_versions": -1}


def concat_samples(datas: list[Any], pad_token_id: int) -> Any:
    """Samples' DataProtos as one batch, rows in the given order: generations finished at different times
    have different response widths, so core's ``concat_rounds`` right-pads them to the widest first."""
    from verl.trainer.ppo.dynamic_sampling import concat_rounds

    return concat_rounds(datas, pad_token_id, fill=RESPONSE_FILL)


__all__ = ["RESPONSE_FILL", "Coordinator", "MessageQueue", "Sample", "Stopped", "SyncRequest", "concat_samples",
           "sample_limit"]
