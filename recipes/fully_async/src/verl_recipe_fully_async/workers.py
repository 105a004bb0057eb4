"""The worker of both pools: core's ``ActorRolloutRefWorker`` plus weight transfer and resumable waves.

On the trainer pool it runs as ``actor_rollout`` (or ``actor_rollout_ref``): core's update, log-prob and
checkpoint methods, its rollout (sharing the actor's module) only for validation, and the sending half
of the weight sync. On the rollout pool it runs as ``rollout``: with the native engine a model copy
without optimizer that generates *waves* (one batch of prompts decoded together, split over the rollout
ranks) step by step, so the rollouter can stream finished groups and pause a wave for a weight sync
(partial rollout); with vLLM (``rollout.mode=async``) an engine that takes requests as they come and
returns samples as they finish (``stream_worker``).
"""

from __future__ import annotations

import os
from typing import Any

import torch
import torch.distributed as dist
from verl import DataProto
from verl.single_controller.base.decorator import Dispatch, register
from verl.workers.fsdp_workers import ActorRolloutRefWorker
from verl.workers.rollout.weight_group import BackgroundReceive, WeightSyncGroup, backend_for, host_store

from verl_recipe_fully_async.stream_worker import StreamingRolloutMixin
from verl_recipe_fully_async.weight_transfer import BUCKET_MB_KEY, buckets_of, receive_into


class AsyncActorRolloutWorker(StreamingRolloutMixin, ActorRolloutRefWorker):
    """``ActorRolloutRefWorker`` with the methods the asynchronous trainer calls (see the module doc)."""

    def __init__(self, config: Any, role: str, *args: Any, **kwargs: Any):
        super().__init__(config, role, *args, **kwargs)
        self._sync_group: WeightSyncGroup | None = None
        self._sync_store = None
        self._background: BackgroundReceive | None = None  # a weight receive running while generating
        self._wave = None  # ResumableGeneration, or the finished output of a non-resumable engine
        self._wave_finished: torch.Tensor | None = None
        self._wave_emitted: torch.Tensor | None = None
        self._generator: torch.Generator | None = None
        self._in_flight = {}  # vLLM: sample index -> its requests (stream_worker)
        self._agent_loop = None  # multi-turn on vLLM: the agent loops' event loop (stream_worker)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self) -> None:
        super().init_model()
        if self.role == "rollout" and not self.rollout.shares_trainer_weights:
            self.rollout.resume()  # a pool of its own: the engine never gives its memory back to training

    def _bucket_mb(self) -> int:
        return int(dict(self.config.rollout.engine_kwargs or {}).get(BUCKET_MB_KEY, 512))

    @property
    def _engine_loads(self) -> bool:
        """The rollout pool's engine holds its own weights (vLLM) and loads the buckets itself."""
        return self.role == "rollout" and not self.rollout.shares_trainer_weights

    def _backend(self) -> str:
        return backend_for(torch.device(self.actor_engine.device).type)

    # ------------------------------------------------------------------ cross-pool group
    @register(dispatch_mode=Dispatch.RANK_ZERO)
    def host_sync_group(self, size: int) -> tuple[str, int]:
        """Trainer rank 0: start the rendezvous store of the cross-pool group; returns (host, port)."""
        import ray

        host = ray.util.get_node_ip_address()
        self._sync_store = host_store(host, size)
        return host, int(self._sync_store.port)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL, blocking=False)
    def join_sync_group(self, host: str, port: int, first_rank: int, size: int) -> None:
        """Join the cross-pool group as rank ``first_rank + rank`` (trainer: only rank 0 joins; a vLLM
        rollout rank joins from inside its engine's worker process). NCCL on GPUs, gloo on CPU."""
        if self._is_actor and dist.get_rank() != 0:
            return
        rank = first_rank + dist.get_rank()
        if self._engine_loads:
            self.rollout.join_weight_group(host, port, rank, size, self._backend())
        else:
            self._sync_group = WeightSyncGroup(
                host, port, rank, size, backend=self._backend(), store=self._sync_store
            )

    # ------------------------------------------------------------------ trainer side
    @register(dispatch_mode=Dispatch.ONE_TO_ALL, blocking=False)
    def send_weights(self, hf_names: bool = False) -> int:
        """Broadcast the actor's full weights over the cross-pool group (every trainer rank gathers;
        rank 0 sends); ``hf_names``: under the HF model's names (for an engine that loads HF checkpoints),
        else the module's own. Returns the bytes sent (0 on other ranks)."""
        state = self._state_for_rollout_pool(hf_names)  # a collective over the trainer pool
        if dist.get_rank() != 0:
            return 0
        return self._sync_group.send_buckets(buckets_of(state, self._bucket_mb()))

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def put_weights(self, hf_names: bool = False) -> list | None:
        """Rank 0: the actor's full weights as object-store references, one per bucket."""
        import ray

        state = self._state_for_rollout_pool(hf_names)
        if dist.get_rank() != 0:
            return None
        return [ray.put(bucket) for bucket in buckets_of(state, self._bucket_mb())]

    def _state_for_rollout_pool(self, hf_names: bool) -> dict[str, torch.Tensor]:
        return self.actor_engine.hf_state_dict() if hf_names else self.actor_engine.full_state_dict()

    # ------------------------------------------------------------------ rollout side
    @register(dispatch_mode=Dispatch.ONE_TO_ALL, blocking=False)
    def receive_weights(self) -> int:
        """Load the weights trainer rank 0 broadcasts; returns the tensors loaded."""
        if self._engine_loads:
            return self.rollout.receive_weights()
        return receive_into(self.actor_engine.module, self._sync_group.recv_buckets())

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def start_receive(self) -> None:
        """Receive the next broadcast in the background (generation goes on); load it with
        :meth:`finish_receive` at the next safe point."""
        if self._engine_loads:
            self.rollout.start_receive()
        else:
            self._background = BackgroundReceive(self._sync_group)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL, blocking=False)
    def finish_receive(self) -> int:
        """Load what :meth:`start_receive` received (waiting for the rest); returns the tensors loaded."""
        if self._engine_loads:
            return self.rollout.finish_receive()
        background, self._background = self._background, None
        return receive_into(self.actor_engine.module, background.wait())

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def load_weights(self, refs: list) -> int:
        """Load the weights behind object-store references (from :meth:`put_weights`)."""
        import ray

        buckets = (ray.get(ref) for ref in refs)
        if self._engine_loads:
            return self.rollout.load_weight_buckets(buckets)
        return receive_into(self.actor_engine.module, buckets)

    @property
    def stepwise(self) -> bool:
        """Whether waves decode step by step (and can pause): the native engine on a module it runs."""
        from verl.workers.rollout.native_rollout import NativeRollout, unsupported_reason

        return isinstance(self.rollout, NativeRollout) and unsupported_reason(self.rollout.module) is None

    @register(dispatch_mode=Dispatch.RANK_ZERO)
    def can_pause(self) -> bool:
        return self.stepwise

    def _rollout_generator(self) -> torch.Generator:
        # one per worker, seeded rollout.seed + rank and drawn from for the whole run
        if self._generator is None:
            device = next(self.actor_engine.module.parameters()).device
            self._generator = torch.Generator(device=device).manual_seed(
                int(self.config.rollout.seed) + dist.get_rank()
            )
        return self._generator

    @register(dispatch_mode=Dispatch.DP_COMPUTE_METRIC)
    def start_wave(self, prompts: DataProto) -> int:
        """Begin generating this rank's share of a wave; returns its row count. On the native engine the
        share decodes step by step (``ResumableGeneration``: groups stream out as they finish, and the
        wave can pause for a weight sync); other engines generate the whole share here, at once."""
        if self._wave is not None:
            raise RuntimeError("start_wave while a wave is still running on this worker")
        if self.stepwise:
            from verl.workers.rollout.partial_rollout import ResumableGeneration

            self._wave = ResumableGeneration(self.rollout, prompts, generator=self._rollout_generator())
            self._wave_finished = self._wave.finished.cpu()
        else:
            self._wave = self.rollout.generate_sequences(prompts)
            # one segment: every token comes from the weights the wave started with
            mask = self._wave.batch["response_mask"].bool()
            self._wave.batch["token_segments"] = torch.where(mask, 0, -1).to(torch.long)
            self._wave_finished = torch.ones(len(prompts), dtype=torch.bool)
        self._wave_emitted = torch.zeros(len(prompts), dtype=torch.bool)
        return len(prompts)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def step_wave(self, max_new_tokens: int, group_size: int) -> tuple[list[int], DataProto | None]:
        """Decode up to ``max_new_tokens`` more tokens; return the local rows of groups (``group_size``
        adjacent rows) that completed since the last call, and their generation (None if none)."""
        wave = self._wave
        if wave is None:
            return [], None
        if not isinstance(wave, DataProto):
            wave.step(max_new_tokens)
            self._wave_finished = wave.finished.cpu()
        done = self._wave_finished.view(-1, group_size).all(-1).repeat_interleave(group_size)
        new = (done & ~self._wave_emitted).nonzero().squeeze(-1)
        self._wave_emitted |= done
        out = None
        if len(new):
            out = wave.select_idxs(new) if isinstance(wave, DataProto) else wave.result(new)
        if bool(self._wave_emitted.all()):
            self._wave = None
        return new.tolist(), out

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def pause_wave(self) -> None:
        if self._wave is not None and not isinstance(self._wave, DataProto):
            self._wave.pause()

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def resume_wave(self) -> None:
        if self._wave is not None and not isinstance(self._wave, DataProto):
            self._wave.resume()

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def process_info(self) -> dict:
        """This worker's pid, role and rank (the kill-and-resume tests find the processes to kill by it)."""
        return {"pid": os.getpid(), "role": self.role, "rank": dist.get_rank()}


__all__ = ["AsyncActorRolloutWorker"]
