"""The rollout pool's streaming methods (``rollout.name=vllm``, ``rollout.mode=async``): prompts go to
vLLM's async engine as the rollouter draws them, finished samples come back one by one.

A *sample* is one prompt's ``rollout.n`` trajectories (one engine request each), keyed by its sample
index. :meth:`StreamingRolloutMixin.submit_samples` starts the requests and returns at once (vLLM
batches them continuously with whatever else is in flight); :meth:`poll_samples` returns the samples
whose every request has finished, as the contract's tensors plus ``token_versions`` (the weights
version of each response token, -1 on padding); :meth:`pause_generation` / :meth:`resume_generation`
bracket a weight load (partial rollout: requests in flight are aborted, keep their tokens, and continue
under the new weights).

With ``multi_turn.enable`` a sample is one run of verl-agent's ``AgentLoopManager`` over its rows (the
worker is ``agent_worker.AgentAsyncActorRolloutWorker``), on an event loop of the worker's own: each model
turn is a request on the same engine, so pauses and versions work turn by turn.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from dataclasses import dataclass, field

import torch
from verl import DataProto
from verl.single_controller.base.decorator import Dispatch, register

_PROMPT_TENSORS = ("input_ids", "attention_mask", "position_ids")


@dataclass
class _InFlight:
    prompts: dict[str, torch.Tensor] | None  # the sample's n prompt rows (left-padded); None: agent loops
    futures: list[concurrent.futures.Future] = field(default_factory=list)  # per row; agents: one, whole

    @property
    def done(self) -> bool:
        return all(f.done() for f in self.futures)


class StreamingRolloutMixin:
    """Methods of ``AsyncActorRolloutWorker`` on a vLLM rollout pool (see the module doc); the worker
    sets ``self._in_flight = {}`` (sample index -> its requests) and ``self._agent_loop = None``."""

    _in_flight: dict[int, _InFlight]
    _agent_loop: asyncio.AbstractEventLoop | None

    def _agent_event_loop(self) -> asyncio.AbstractEventLoop:
        """The event loop the agent loops run on (a daemon thread, started on first use)."""
        if self._agent_loop is None:
            self._agent_loop = asyncio.new_event_loop()
            threading.Thread(target=self._agent_loop.run_forever, name="agent-loops", daemon=True).start()
        return self._agent_loop

    @register(dispatch_mode=Dispatch.RANK_ZERO)
    def can_stream(self) -> bool:
        """Whether this pool streams requests (vLLM's async engine) instead of decoding waves."""
        return self.config.rollout.name == "vllm" and self.config.rollout.mode == "async"

    @register(dispatch_mode=Dispatch.ALL_TO_ALL)
    def submit_samples(self, prompts: DataProto | None) -> int:
        """Start this rank's share (None: nothing): rows with ``non_tensor_batch["sample_index"]``, each
        sample's ``rollout.n`` rows adjacent. Returns the samples now in flight on this rank."""
        from verl.workers.rollout.hf_rollout import sampling_params_for
        from verl.workers.rollout.vllm_rollout import translate

        streams = self._in_flight
        if prompts is None or len(prompts) == 0:
            return len(streams)
        if self.config.rollout.multi_turn.enable:
            return self._submit_agent_samples(prompts)
        params = sampling_params_for(self.config.rollout, prompts.meta_info)
        keys = [int(k) for k in prompts.non_tensor_batch["sample_index"]]
        rows = translate.prompt_rows(prompts.batch["input_ids"], prompts.batch["attention_mask"])
        for i, (key, row) in enumerate(zip(keys, rows)):
            if key not in streams:
                mine = [j for j, k in enumerate(keys) if k == key]
                streams[key] = _InFlight({k: prompts.batch[k][mine] for k in _PROMPT_TENSORS})
            streams[key].futures.append(self.rollout.submit(row, params, f"s{key}.{i}"))
        return len(streams)

    def _submit_agent_samples(self, prompts: DataProto) -> int:
        keys = [int(k) for k in prompts.non_tensor_batch["sample_index"]]
        for key in dict.fromkeys(keys):
            rows = prompts.select_idxs([j for j, k in enumerate(keys) if k == key])
            future = asyncio.run_coroutine_threadsafe(
                self.agent_manager.agenerate(rows), self._agent_event_loop()
            )
            self._in_flight[key] = _InFlight(None, [future])
        return len(self._in_flight)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def poll_samples(self, timeout_s: float) -> list[tuple[int, DataProto]]:
        """The samples finished since the last call (waiting up to ``timeout_s`` for a first one)."""
        from verl.workers.rollout.vllm_rollout import translate

        streams = self._in_flight
        deadline = time.monotonic() + float(timeout_s)
        while streams and not any(s.done for s in streams.values()):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            pending = [f for s in streams.values() for f in s.futures if not f.done()]
            concurrent.futures.wait(pending, timeout=left, return_when=concurrent.futures.FIRST_COMPLETED)
        out = []
        for key in [k for k, s in streams.items() if s.done]:
            sample = streams.pop(key)
            if sample.prompts is None:  # agent loops: the manager's batch, token_versions included
                data = sample.futures[0].result()
                if "token_versions" not in data.batch.keys():
                    raise RuntimeError(
                        "an agent loop did not report the weights version of its tokens "
                        "(AgentLoopOutput.response_versions): the staleness bound needs them"
                    )
                out.append((key, DataProto(batch=data.batch, non_tensor_batch=data.non_tensor_batch)))
                continue
            outputs = [f.result() for f in sample.futures]  # a failed request raises here
            with_log_probs = outputs[0].log_probs is not None
            p = sample.prompts
            tensors = translate.assemble_batch(
                p["input_ids"],
                p["attention_mask"],
                p["position_ids"],
                outputs,
                self.rollout.pad_token_id,
                with_log_probs,
            )
            versions = torch.full_like(tensors["responses"], -1)
            for i, o in enumerate(outputs):
                versions[i, : len(o.versions)] = torch.tensor(o.versions, dtype=versions.dtype)
            tensors["token_versions"] = versions
            out.append((key, DataProto.from_dict(tensors=tensors)))
        return out

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def pause_generation(self) -> int:
        """Abort the requests in flight (each keeps its tokens); returns how many there were."""
        return self.rollout.pause_generation()

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def resume_generation(self, version: int) -> None:
        """Continue (and tag new tokens with) weights ``version``."""
        self.rollout.resume_generation(version)


__all__ = ["StreamingRolloutMixin"]
