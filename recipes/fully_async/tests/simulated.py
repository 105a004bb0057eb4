"""A simulated rollout pool and trainer for the rollouter's loop (no Ray, no model).

The simulated pool keeps ``ResumableGeneration``'s bookkeeping (rows of random lengths decoded a few
tokens per step, ``token_segments`` advanced by each pause/resume), so partial rollouts span syncs for real.
"""

import math
import random
import threading
import time

import numpy as np
import torch
from omegaconf import OmegaConf
from verl import DataProto
from verl_recipe_fully_async.message_queue import SyncRequest


class SimulatedPool:
    """A rollout worker group of one worker: waves of rows with random lengths, decoded step by step."""

    world_size = 1

    def __init__(self, seed, step_delay, min_len=1):
        self.rng = random.Random(seed)
        self.step_delay = step_delay
        self.min_len = min_len
        self.wave = None
        self.loaded = []

    def start_wave(self, gen):
        rows = len(gen)
        self.lengths = [self.rng.randint(self.min_len, 6) for _ in range(rows)]
        self.segments = [[] for _ in range(rows)]
        self.segment = 0
        self.emitted = [False] * rows
        self.wave = gen
        return [rows]

    def step_wave(self, k, n):
        time.sleep(self.step_delay * self.rng.random())
        for segs, length in zip(self.segments, self.lengths):
            for _ in range(min(k, length - len(segs))):
                segs.append(self.segment)
        done = [len(s) == length for s, length in zip(self.segments, self.lengths)]
        new = []
        for g in range(len(done) // n):
            rows = range(g * n, (g + 1) * n)
            if all(done[r] for r in rows) and not self.emitted[g * n]:
                new.extend(rows)
                for r in rows:
                    self.emitted[r] = True
        out = None
        if new:
            width = max(self.lengths[r] for r in new)
            seg = torch.full((len(new), width), -1, dtype=torch.long)
            mask = torch.zeros((len(new), width), dtype=torch.long)
            for i, r in enumerate(new):
                seg[i, : self.lengths[r]] = torch.tensor(self.segments[r])
                mask[i, : self.lengths[r]] = 1
            out = DataProto.from_dict(
                tensors={"token_segments": seg, "response_mask": mask, "responses": torch.zeros_like(mask)}
            )
        if all(self.emitted):
            self.wave = None
        return [(new, out)]

    def pause_wave(self):
        pass

    def resume_wave(self):
        if self.wave is not None:
            self.segment += 1

    def load_weights(self, payload):
        self.loaded.append(payload)


class FakeTrainer:
    """What the rollouter asks of the trainer: prompts, the rollout input, the reward stage, the config."""

    def __init__(self, cfg):
        self.config = cfg
        self.drawn = 0
        self.global_steps = 0
        self.epoch = 0
        self.train_dataloader = self  # the loader's state is how many prompts were drawn

    @property
    def _batches_consumed(self):
        return self.drawn // 4

    def state_dict(self):
        return {"drawn": self.drawn}

    def next_batch(self):
        ids = torch.arange(self.drawn, self.drawn + 4).unsqueeze(1)
        self.drawn += 4
        return {
            "input_ids": ids,
            "attention_mask": torch.ones_like(ids),
            "position_ids": torch.zeros_like(ids),
            "prompt_id": np.arange(self.drawn - 4, self.drawn).astype(object),
        }

    def rollout_input(self, batch, do_sample, validate):
        return DataProto(batch=batch.batch, non_tensor_batch=dict(batch.non_tensor_batch), meta_info={})

    def stage_reward(self, data, metrics):
        return data


def config(s, trigger, tbs, wave, partial):
    return OmegaConf.create(
        {
            "data": {"train_batch_size": tbs, "gen_batch_size": wave},
            "actor_rollout_ref": {"rollout": {"n": 2, "do_sample": True, "temperature": 1.0}},
            "async_training": {
                "staleness_threshold": s,
                "trigger_parameter_sync_step": trigger,
                "partial_rollout": partial,
                "partial_rollout_step_tokens": 2,
                "weight_sync": "object_store",
                "overlap_weight_sync": False,
            },
        }
    )


class SimulatedStreamingPool:
    """A streaming rollout worker group (vLLM's surface in ``stream_worker``) of ``world_size`` ranks:
    each request has a random length and advances a random number of tokens per poll, tagged with the
    weights version it was generated under; samples finish out of order; a pause holds every request."""

    def __init__(self, seed, poll_delay, world_size=1, max_len=8):
        self.rng = random.Random(seed)
        self.poll_delay = poll_delay
        self.world_size = world_size
        self.max_len = max_len
        self.requests = {}  # sample index -> (rank, [length per row], [[versions] per row])
        self.version = 0
        self.paused = False
        self.loaded = []
        self.pauses = 0

    def submit_samples(self, shares):
        assert len(shares) == self.world_size
        for rank, share in enumerate(shares):
            if share is None:
                continue
            keys = [int(k) for k in share.non_tensor_batch["sample_index"]]
            for key in dict.fromkeys(keys):
                n = keys.count(key)
                self.requests[key] = (
                    rank,
                    [self.rng.randint(1, self.max_len) for _ in range(n)],
                    [[] for _ in range(n)],
                )
        return [sum(r == rank for r, _, _ in self.requests.values()) for rank in range(self.world_size)]

    def poll_samples(self, timeout_s):
        time.sleep(self.poll_delay * self.rng.random())
        assert not self.paused, "polled while paused"
        for _, lengths, versions in self.requests.values():
            for length, v in zip(lengths, versions):
                for _ in range(min(self.rng.randint(0, 2), length - len(v))):
                    v.append(self.version)
        out = [[] for _ in range(self.world_size)]
        for key in [
            k for k, (_, ls, vs) in self.requests.items() if all(len(v) == n for v, n in zip(vs, ls))
        ]:
            rank, lengths, versions = self.requests.pop(key)
            width = max(lengths)
            tv = torch.full((len(lengths), width), -1, dtype=torch.long)
            mask = torch.zeros((len(lengths), width), dtype=torch.long)
            for i, v in enumerate(versions):
                tv[i, : len(v)] = torch.tensor(v)
                mask[i, : len(v)] = 1
            data = DataProto.from_dict(
                tensors={"token_versions": tv, "response_mask": mask, "responses": torch.zeros_like(mask)}
            )
            out[rank].append((key, data))
        return out

    def pause_generation(self):
        self.paused = True
        self.pauses += 1
        return [len(self.requests)]

    def resume_generation(self, version):
        self.paused = False
        self.version = version

    def load_weights(self, payload):
        assert self.paused or not self.requests, "weights loaded while requests were generating"
        self.loaded.append(payload)


def train_against(rollouter, coord, tbs, trigger, steps, train_delay, seed):
    """Run ``rollouter`` in a thread while this thread plays the trainer: ``steps`` batches of ``tbs``
    samples, each taking up to ``train_delay`` s, a weight sync every ``trigger`` steps and after the last.
    Returns ``[(trainer version, sample), ...]`` in the order trained; the rollouter must not have failed."""
    thread = threading.Thread(target=rollouter.run)
    thread.start()
    rng = random.Random(seed + 1)
    consumed = []
    try:
        for step in range(1, steps + 1):
            batch = coord.get(tbs)
            consumed += [(coord.trainer_version, smp) for smp in batch]
            time.sleep(train_delay * rng.random())
            if step % trigger == 0 or step == steps:
                coord.post_sync(SyncRequest(coord.trainer_version + 1, payload=f"w{step}"))
    finally:
        coord.stop()
        thread.join()
    assert coord.error is None, coord.error
    return consumed


def check_staleness(consumed, steps, tbs, s, W) -> None:
    """Every one of ``steps x tbs`` samples trained once, at most ``floor(s x W)`` stale samples in each
    sync window (none at all with ``s = 0``)."""
    assert len(consumed) == steps * tbs
    assert sorted(smp.index for _, smp in consumed) == list(range(steps * tbs))  # every sample once
    bound = math.floor(s * W)
    windows: dict[int, list[int]] = {}
    for version, smp in consumed:
        windows.setdefault(version, []).append(version - smp.version)
    for version, ages in windows.items():
        assert sum(a > 0 for a in ages) <= bound, (version, ages, bound)
    if s == 0.0:
        assert all(a == 0 for ages in windows.values() for a in ages)
