"""The rollouter: a driver thread that keeps the rollout pool generating.

Loop: load new weights when the trainer published some (at a safe point, see below); otherwise start a
*wave* of up to ``data.gen_batch_size`` prompts when the staleness bound admits samples (the
`Coordinator` decides), or advance the running wave by ``async_training.partial_rollout_step_tokens``
tokens; every prompt group that finished is scored (the trainer's ``stage_reward``) and queued as a
`Sample` at once (streaming), tagged with the versions of the weights that generated it.

Safe points. With ``partial_rollout`` a wave is paused between two steps, the weights are loaded, and it
resumes under them (its later tokens come from the new weights). Without, a pending sync waits for the
running wave to finish, and no new wave starts meanwhile (upstream's two modes). With the collective
transport and ``async_training.overlap_weight_sync`` the pool starts receiving the broadcast as soon as
the trainer sends it, while it keeps generating, and loads it at the safe point.

Every queued sample carries ``token_versions`` (the weights version of each response token, -1 on
padding) and, per trajectory, upstream's ``param_version_start`` / ``param_version_end`` (the versions
of its first and last tokens); the `Sample`'s ``version`` / ``end_version`` are their minimum / maximum.
``streaming.StreamingRollouter`` is the same loop for an engine that takes requests one by one (vLLM).

Checkpoints happen at a sync: the rollouter reports its state (`state_dict`): the queue's samples and
counters, the dataloader position, and the prompts it drew but has not finished: the unfinished groups
of the running wave are deliberately dropped (counted in ``dropped_partial_samples``) and their prompts,
like those drawn but not started, are generated again from scratch after a resume. Nothing drawn from
the data is lost.
"""

from __future__ import annotations

import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import ray
import torch
from verl import DataProto

from verl_recipe_fully_async.config import scores_off_thread
from verl_recipe_fully_async.message_queue import Coordinator, Sample, Stopped, SyncRequest
from verl_recipe_fully_async.scoring import ScoringPipeline

# prompt tensors the rollout replaces with prompt + response tensors of the same names
_PROMPT_TENSORS = ("input_ids", "attention_mask", "position_ids")


def wait_refs(coord: Coordinator, refs: list) -> list:
    """``ray.get(refs)``, giving up (`Stopped`) when the run stops meanwhile: a weight broadcast whose
    other side failed would otherwise block until gloo's timeout."""
    pending = list(refs)
    while pending:
        _, pending = ray.wait(pending, num_returns=len(pending), timeout=0.5)
        if pending and coord.stopped:
            coord.raise_if_stopped()
    return ray.get(refs)


def sample_data(gen: DataProto, rows: DataProto) -> DataProto:
    """One prompt's generation as the trainer sees it: the rollout's tensors, the prompt rows' fields,
    then what the rollout adds (agent loops: ``num_turns``, ``reward_score``, ``tool_rewards``, ...),
    as core's generate stage merges them."""
    return DataProto(batch=gen.batch, non_tensor_batch={**rows.non_tensor_batch, **gen.non_tensor_batch})


def make_sample(data: DataProto, index: int) -> Sample:
    """A queued sample from one prompt's scored trajectories with ``token_versions``: each trajectory's
    ``param_version_start`` / ``param_version_end`` (non-tensors), the sample's oldest and newest version."""
    mask = data.batch["response_mask"].bool()
    versions = data.batch["token_versions"]
    has = mask.any(-1)
    start = torch.where(mask, versions, torch.iinfo(versions.dtype).max).min(-1).values
    end = torch.where(mask, versions, -1).max(-1).values
    start, end = torch.where(has, start, end), torch.where(has, end, start)
    data.non_tensor_batch["param_version_start"] = start.numpy().astype(np.int64)
    data.non_tensor_batch["param_version_end"] = end.numpy().astype(np.int64)
    return Sample(data=data, version=int(start.min()), end_version=int(end.max()), index=index)


@dataclass
class Wave:
    """One batch of prompts in flight on the rollout pool."""

    prompts: DataProto  # the prompt rows, one per prompt (as drawn; for a checkpoint)
    batch: DataProto  # the rows as generated: each prompt repeated rollout.n times, with its uid
    first_index: int  # sample index of the first prompt
    versions: list[int]  # weights version of each decode segment (segment k -> versions[k])
    rows_per_worker: int
    emitted: set[int] = field(default_factory=set)  # prompts whose group was queued

    @property
    def finished(self) -> bool:
        return len(self.emitted) == len(self.prompts)


class Rollouter:
    """Drives the rollout worker group; ``trainer`` supplies the data, the reward stage and the config."""

    def __init__(self, trainer: Any, coord: Coordinator, rollout_wg: Any):
        self.trainer = trainer
        self.coord = coord
        self.wg = rollout_wg
        cfg = trainer.config
        at = cfg.async_training
        self.n = int(cfg.actor_rollout_ref.rollout.n)
        self.wave_prompts = int(cfg.data.gen_batch_size)
        self.step_tokens = int(at.partial_rollout_step_tokens)
        self.partial_rollout = bool(at.partial_rollout)
        self.transport = str(at.weight_sync)
        self.overlap = self.transport == "collective" and bool(at.overlap_weight_sync)
        self._receiving = False  # a background weight receive was started for the pending sync
        self.do_sample = bool(cfg.actor_rollout_ref.rollout.do_sample)
        self.temperature = float(cfg.actor_rollout_ref.rollout.temperature)
        self.wave: Wave | None = None
        self.buffer: deque[DataProto] = deque()  # prompts drawn from the loader, not started yet
        self.pending: deque[DataProto] = deque()  # prompts to generate first (restored from a checkpoint)
        self.next_index = coord.started
        self.dropped_partial_samples = 0
        self.busy_s = 0.0  # seconds the rollout pool spent in calls
        self.sync_s = 0.0
        # a reward model or judge scores on a thread of its own (scoring.py); rule rewards score inline
        self.scorer = None
        if scores_off_thread(cfg):
            pad = trainer.rollouter_pad_id
            self.scorer = ScoringPipeline(lambda b: trainer.stage_reward(b, {}), make_sample, coord, pad)

    # ------------------------------------------------------------------ thread body
    def run(self) -> None:
        """The thread's body: `_loop` until the coordinator stops; a failure stops the coordinator."""
        try:
            self._loop()
        except Stopped:
            return
        except BaseException as e:  # the trainer thread re-raises it from its next wait
            self.coord.stop(e)
        finally:
            self._close()

    def _loop(self) -> None:
        while True:
            self._serve_sync()
            if self.wave is None:
                admitted = self.coord.admit(self.wave_prompts)
                if admitted == 0:
                    self.coord.wait_for_work()
                    continue
                self._start_wave(admitted)
            else:
                self._step_wave()

    def _close(self) -> None:
        if self.scorer is not None:
            self.scorer.close()

    def _call(self, fn, *args):
        t0 = time.perf_counter()
        out = fn(*args)
        self.busy_s += time.perf_counter() - t0
        return out

    # ------------------------------------------------------------------ weights
    def _serve_sync(self) -> None:
        """Load pending weights at a safe point; start receiving them early when overlapping."""
        request = self.coord.pending_sync()
        if request is None:
            return
        if self.overlap and not self._receiving:
            self.coord.mark_receiving(request)
            self._call(self.wg.start_receive)
            self._receiving = True
        if not (self.partial_rollout or self._idle()):
            return  # without partial rollouts the work in flight finishes under the old weights first
        request = self.coord.take_sync()
        t0 = time.perf_counter()
        paused = self._pause()
        self._call(self.load, request)
        if request.snapshot and self.scorer is not None:
            self.scorer.drain()  # the samples being scored belong in the saved queue
        self.coord.finish_sync(request, self.state_dict if request.snapshot else None)
        self._resume(request.version, paused)
        self.sync_s += time.perf_counter() - t0

    def _idle(self) -> bool:
        """No generation in flight."""
        return self.wave is None

    def _pause(self) -> bool:
        """Hold the generation in flight for a weight load; returns whether there was any."""
        if self.wave is None:
            return False
        self._call(self.wg.pause_wave)
        return True

    def _resume(self, version: int, paused: bool) -> None:
        if paused:
            self.wave.versions.append(version)
            self._call(self.wg.resume_wave)

    def load(self, request: SyncRequest) -> None:
        """Load ``request``'s weights into the rollout pool (blocks until they are in)."""
        if self.transport == "collective":
            method = self.wg.finish_receive if self._receiving else self.wg.receive_weights
            self._receiving = False
            wait_refs(self.coord, method())
        else:
            self.wg.load_weights(request.payload)

    # ------------------------------------------------------------------ waves
    def _take_prompts(self, k: int) -> DataProto:
        rows = []
        while len(rows) < k:
            if self.pending:
                rows.append(self.pending.popleft())
                continue
            if not self.buffer:
                drawn = DataProto.from_single_dict(self.trainer.next_batch())
                self.buffer.extend(drawn.slice(i, i + 1) for i in range(len(drawn)))
            rows.append(self.buffer.popleft())
        return DataProto.concat(rows)

    def _start_wave(self, k: int) -> None:
        prompts = self._take_prompts(k)
        batch = DataProto(batch=prompts.batch, non_tensor_batch=dict(prompts.non_tensor_batch), meta_info={})
        batch.non_tensor_batch["uid"] = np.array([str(uuid.uuid4()) for _ in range(k)], dtype=object)
        batch = batch.repeat(repeat_times=self.n, interleave=True)
        gen = self.trainer.rollout_input(batch, do_sample=self.do_sample, validate=False)
        gen.meta_info["temperature"] = self.temperature
        self._call(self.wg.start_wave, gen)
        batch.pop(batch_keys=list(_PROMPT_TENSORS))
        self.wave = Wave(
            prompts=prompts,
            batch=batch,
            first_index=self.next_index,
            versions=[self.coord.rollout_version],
            rows_per_worker=len(batch) // self.wg.world_size,
        )
        self.next_index += k

    def _step_wave(self) -> None:
        wave = self.wave
        outputs = self._call(self.wg.step_wave, self.step_tokens, self.n)
        for rank, (rows, out) in enumerate(outputs):
            if out is None:
                continue
            for g in range(len(rows) // self.n):
                first = rank * wave.rows_per_worker + rows[g * self.n]
                gen = out.slice(g * self.n, (g + 1) * self.n)
                self._queue_group(wave, first // self.n, gen)
        if wave.finished:
            self.wave = None

    def _queue_group(self, wave: Wave, prompt: int, gen: DataProto) -> None:
        rows = wave.batch.slice(prompt * self.n, (prompt + 1) * self.n)
        segments = gen.batch["token_segments"]
        lut = torch.tensor(wave.versions, dtype=segments.dtype)
        gen.batch["token_versions"] = torch.where(segments >= 0, lut[segments.clamp(min=0)], -1)
        self._queue(gen, rows, wave.first_index + prompt)
        wave.emitted.add(prompt)

    def _queue(self, gen: DataProto, rows: DataProto, index: int) -> None:
        """Score one prompt's generation (``rows``: its non-tensors, uid included) and queue it."""
        data = sample_data(gen, rows)
        if self.scorer is not None:
            self.scorer.submit(data, index)
            return
        data = self.trainer.stage_reward(data, {})  # the trainer's metrics come from its whole batch
        if not self.coord.put(make_sample(data, index)):
            raise RuntimeError(
                f"the sample queue (capacity {self.coord.queue.capacity}) is full while a weight sync waits; "
                "the staleness bound should make this impossible"
            )

    # ------------------------------------------------------------------ checkpoints
    def _unfinished_prompts(self) -> list[DataProto]:
        """The prompts in flight whose samples are not queued yet (a checkpoint generates them again)."""
        if self.wave is None:
            return []
        return [
            self.wave.prompts.slice(i, i + 1)
            for i in range(len(self.wave.prompts))
            if i not in self.wave.emitted
        ]

    def state_dict(self) -> dict:
        """Called at a sync point (the rollout pool is idle between two calls)."""
        unfinished = self._unfinished_prompts()
        t = self.trainer
        return {
            "coordinator": self.coord.state_dict(),
            "prompts_to_generate": [*unfinished, *self.pending, *self.buffer],
            "dropped_partial_samples": self.dropped_partial_samples + len(unfinished),
            "dataloader": t.train_dataloader.state_dict(),
            "batches_consumed": t._batches_consumed,
            "epoch": t.epoch,
        }

    def load_state_dict(self, state: dict) -> None:
        """Resume: the queue and counters come back; unfinished and unstarted prompts go first."""
        self.coord.load_state_dict(state["coordinator"])
        self.pending = deque(state["prompts_to_generate"])
        self.dropped_partial_samples = int(state["dropped_partial_samples"])
        self.next_index = self.coord.started


__all__ = ["Rollouter", "Wave", "make_sample", "sample_data", "wait_refs"]
