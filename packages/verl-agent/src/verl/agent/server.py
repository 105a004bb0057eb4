"""Token-in / token-out generation shared by many concurrent agent loops.

Agent loops talk to the policy through one small async interface, :class:`AsyncLLMServer`:

    out = await server.generate(prompt_ids, sampling_params, request_id)
    out.token_ids, out.log_probs, out.stop_reason      # "stop" (a stop token ended it) or "length"

``sampling_params`` is a plain dict: ``max_tokens`` (required), ``temperature``, ``top_k``, ``top_p``,
``do_sample``, ``seed`` (optional: the request samples from its own generator seeded with it, so
its tokens do not depend on which requests share its batch or in what order they arrived). :class:`HFAsyncServer` serves it from the trainer's own HF module (the one the ``hf``
rollout samples from, so agent rollouts see every actor update): requests that arrive within a few
milliseconds of each other are decoded as one left-padded batch (plain batching; the HF engine has
no continuous batching), one batch at a time on a single decode thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass
class TokenOutput:
    """One generation: the sampled ids (ending with the stop token when ``stop_reason == "stop"``),
    the log-prob of each under the sampling distribution, and why it ended; ``versions``: the weights
    version that sampled each token, from servers whose requests survive weight updates (vLLM's async
    engine on a rollout pool of its own), else None."""

    token_ids: list[int]
    log_probs: list[float]
    stop_reason: str  # "stop" | "length"
    versions: list[int] | None = None


class AsyncLLMServer(ABC):
    """The async generate interface agent loops, the chat endpoint and test stand-ins implement."""

    #: token ids that end an assistant turn (EOS and the chat template's end-of-turn token)
    stop_token_ids: Sequence[int] = ()

    @abstractmethod
    async def generate(
        self, prompt_ids: list[int], sampling_params: dict[str, Any], request_id: str
    ) -> TokenOutput: ...


def check_request(prompt_ids: list[int], sampling_params: dict[str, Any], request_id: str) -> None:
    """What every engine-backed server needs of a request: a prompt, and ``max_tokens >= 1``."""
    if "max_tokens" not in sampling_params or int(sampling_params["max_tokens"]) < 1:
        raise ValueError(f"request {request_id}: sampling_params needs max_tokens >= 1, got {sampling_params!r}")
    if not prompt_ids:
        raise ValueError(f"request {request_id}: empty prompt")


def sampling_key(sampling_params: dict[str, Any]) -> tuple:
    """Requests with the same key can share one batched decode (``max_tokens`` may differ)."""
    return (
        bool(sampling_params.get("do_sample", True)),
        float(sampling_params.get("temperature", 1.0)),
        int(sampling_params.get("top_k", -1)),
        float(sampling_params.get("top_p", 1.0)),
    )


@dataclass
class _Request:
    prompt_ids: list[int]
    params: dict[str, Any]
    future: asyncio.Future = field(repr=False)


def left_pad(rows: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``input_ids``, ``attention_mask``, ``position_ids`` [B, max_len] for left-padded ``rows``."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        if r:
            ids[i, width - len(r) :] = torch.tensor(r, dtype=torch.long)
            mask[i, width - len(r) :] = 1
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    return ids, mask, pos


class HFAsyncServer(AsyncLLMServer):
    """Plain batching over an HF causal LM with verl-workers' decode loop (``generate_tokens``).

    Args:
        module: the causal LM (the actor's live module in the hybrid engine).
        stop_token_ids: ids that end a turn; decoding of a row stops at the first one (kept).
        pad_token_id: filler for left padding.
        batch_window_ms: how long the first request of a batch waits for others to join.
        max_batch_size: most requests decoded together.
        sync_group: the torch.distributed group the decode loop agrees on "anyone still running"
            with; pass a single-rank group when ranks run different request streams.
    """

    def __init__(
        self,
        module: torch.nn.Module,
        stop_token_ids: Sequence[int],
        pad_token_id: int,
        *,
        batch_window_ms: float = 5.0,
        max_batch_size: int = 64,
        sync_group: Any = None,
    ):
        if not stop_token_ids:
            raise ValueError("HFAsyncServer needs at least one stop token id (EOS / end of turn)")
        self.module = module
        self.stop_token_ids = list(stop_token_ids)
        self.pad_token_id = int(pad_token_id)
        self.batch_window_ms = batch_window_ms
        self.max_batch_size = max_batch_size
        self.sync_group = sync_group
        self._queue: asyncio.Queue[_Request] | None = None
        self._worker: asyncio.Task | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        # One decode thread: the event loop stays free for tools while the model runs.
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="hf-decode")
        #: batch sizes of the decodes run so far (for metrics and tests)
        self.batch_sizes: list[int] = []

    def _ensure_started(self) -> None:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:  # first use, or a new asyncio.run() per rollout
            self._loop = loop
            self._queue = asyncio.Queue()
            self._worker = loop.create_task(self._serve())

    async def generate(
        self, prompt_ids: list[int], sampling_params: dict[str, Any], request_id: str
    ) -> TokenOutput:
        check_request(prompt_ids, sampling_params, request_id)
        self._ensure_started()
        fut = asyncio.get_running_loop().create_future()
        await self._queue.put(_Request(list(prompt_ids), dict(sampling_params), fut))
        return await fut

    async def _serve(self) -> None:
        while True:
            first = await self._queue.get()
            batch = [first]
            await asyncio.sleep(self.batch_window_ms / 1000.0)
            while not self._queue.empty() and len(batch) < self.max_batch_size:
                batch.append(self._queue.get_nowait())
            groups: dict[tuple, list[_Request]] = {}
            for req in batch:
                groups.setdefault(sampling_key(req.params), []).append(req)
            for reqs in groups.values():
                try:
                    outs = await asyncio.get_running_loop().run_in_executor(
                        self._executor, self._decode, reqs
                    )
                except Exception as e:  # hand the error to every waiting loop, keep serving
                    for r in reqs:
                        if not r.future.done():
                            r.future.set_exception(e)
                    continue
                for r, o in zip(reqs, outs):
                    if not r.future.done():
                        r.future.set_result(o)

    def _decode(self, reqs: list[_Request]) -> list[TokenOutput]:
        from verl.workers.rollout.hf_rollout import SamplingParams, generate_tokens

        do_sample, temperature, top_k, top_p = sampling_key(reqs[0].params)
        longest = max(int(r.params["max_tokens"]) for r in reqs)
        params = SamplingParams(
            response_length=longest, do_sample=do_sample, temperature=temperature, top_k=top_k, top_p=top_p
        )
        device = next(self.module.parameters()).device
        ids, mask, pos = (t.to(device) for t in left_pad([r.prompt_ids for r in reqs], self.pad_token_id))
        seeds = [r.params.get("seed") for r in reqs]
        generators = None
        if do_sample and any(s is not None for s in seeds):
            if any(s is None for s in seeds):
                raise ValueError("requests batched together must all give a sampling seed, or none")
            generators = [torch.Generator(device=device).manual_seed(int(s)) for s in seeds]
        was_training = self.module.training
        self.module.eval()
        try:
            out = generate_tokens(
                self.module,
                ids,
                mask,
                pos,
                params,
                self.stop_token_ids,
                self.pad_token_id,
                calculate_log_probs=True,
                generator=generators,
                sync_group=self.sync_group,
            )
        finally:
            self.module.train(was_training)
        self.batch_sizes.append(len(reqs))
        results = []
        for i, r in enumerate(reqs):
            n = int(out["response_mask"][i].sum())
            toks = out["responses"][i, :n].tolist()
            lps = out["rollout_log_probs"][i, :n].tolist()
            cap = int(r.params["max_tokens"])
            toks, lps = toks[:cap], lps[:cap]  # this request may want fewer tokens than the batch ran
            stopped = bool(toks) and toks[-1] in self.stop_token_ids
            results.append(TokenOutput(toks, lps, "stop" if stopped else "length"))
        return results


class ScriptedLLMServer(AsyncLLMServer):
    """A stand-in model that answers from a script, for tests that need exact outputs.

    ``script`` is a list of replies (token id lists, or strings encoded with ``tokenizer``); call k
    gets reply k (the last reply repeats when the script runs out), cut at ``max_tokens``. Or it is
    a function of the prompt text returning the reply (for concurrent loops, whose calls interleave).
    A reply is followed by ``stop_token_ids[0]`` unless it already ends with a stop token or
    ``add_stop`` is false. Every token gets log-prob ``log_prob``. Prompts seen are kept in
    ``prompts``; ``max_in_flight`` is the most requests that were waiting at the same time.
    """

    def __init__(
        self,
        script: list[list[int] | str] | Callable[[str], list[int] | str],
        stop_token_ids: Sequence[int],
        tokenizer: Any = None,
        *,
        add_stop: bool = True,
        log_prob: float = -0.5,
    ):
        self.stop_token_ids = list(stop_token_ids)
        self.tokenizer = tokenizer
        self.add_stop = add_stop
        self.respond = script if callable(script) else None
        self.replies = [] if callable(script) else [self._ids(reply) for reply in script]
        self.log_prob = log_prob
        self.prompts: list[list[int]] = []
        self.request_ids: list[str] = []
        self.in_flight = self.max_in_flight = 0

    def _ids(self, reply: list[int] | str) -> list[int]:
        ids = (
            self.tokenizer.encode(reply, add_special_tokens=False) if isinstance(reply, str) else list(reply)
        )
        if self.add_stop and (not ids or ids[-1] not in self.stop_token_ids):
            ids.append(self.stop_token_ids[0])
        return ids

    async def generate(
        self, prompt_ids: list[int], sampling_params: dict[str, Any], request_id: str
    ) -> TokenOutput:
        k = len(self.prompts)
        self.prompts.append(list(prompt_ids))
        self.request_ids.append(request_id)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        await asyncio.sleep(0)  # let other loops interleave, as a real server would
        self.in_flight -= 1
        if self.respond is not None:
            reply = self._ids(self.respond(self.tokenizer.decode(prompt_ids, skip_special_tokens=False)))
        else:
            reply = self.replies[min(k, len(self.replies) - 1)]
        cap = int(sampling_params["max_tokens"])
        toks = reply[:cap]
        stopped = bool(toks) and toks[-1] in self.stop_token_ids
        return TokenOutput(toks, [self.log_prob] * len(toks), "stop" if stopped else "length")
