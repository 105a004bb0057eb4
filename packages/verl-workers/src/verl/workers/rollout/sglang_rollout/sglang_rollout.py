"""``rollout.name=sglang``: sampling through SGLang's offline ``Engine``, colocated with the FSDP actor.

Written against SGLang's documented Engine API and NOT RUN here (SGLang's CPU engine needs Intel AMX
and a source build; these machines have neither). What is tested on CPU: the config translation, the
request building, the output assembly and the weight-sync / memory bookkeeping, against a recording
stand-in for the engine.

- engine: ``sglang.Engine(model_path=..., skip_tokenizer_init=True, ...)``, one per training rank
  (``tp_size=1``), ``random_seed = rollout.seed + rank``;
- requests: ``engine.generate(input_ids=[[...], ...], sampling_params={...}, return_logprob=True)``,
  token ids in and out (``output_ids``, ``meta_info.output_token_logprobs``, ``meta_info.finish_reason``);
- weights: ``update_weights_from_tensor(named_tensors, flush_cache=False)`` per bucket of the bucketed
  sync, one ``flush_cache()`` at the end;
- memory (``free_cache_engine``, SGLang's memory saver): ``release_memory_occupation`` after init and
  after each generation, ``resume_memory_occupation(tags=["weights"])`` before a sync and
  ``(tags=["kv_cache"])`` before generating.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from torch import nn
from verl.workers.rollout.base import BaseRollout, register_rollout
from verl.workers.rollout.hf_rollout import SamplingParams, sampling_params_for, stop_and_pad_ids
from verl.workers.rollout.native_rollout import pad_responses_to
from verl.workers.rollout.vllm_rollout.translate import RowOutput, assemble_batch, prompt_rows

if TYPE_CHECKING:
    from verl import DataProto
    from verl.workers.rollout.weight_sync import WeightBucket

#: engine keyword -> the rollout key that sets it (engine_kwargs.sglang may not set these again)
OWNED_KEYS = {
    "model_path": "actor_rollout_ref.model.path",
    "dtype": "rollout.dtype",
    "tp_size": "rollout.tensor_model_parallel_size",
    "mem_fraction_static": "rollout.gpu_memory_utilization",
    "chunked_prefill_size": "rollout.max_num_batched_tokens / enable_chunked_prefill",
    "context_length": "rollout.max_model_len",
    "max_running_requests": "rollout.max_num_seqs",
    "disable_cuda_graph": "rollout.enforce_eager",
    "disable_radix_cache": "rollout.enable_prefix_caching",
    "load_format": "rollout.load_format",
    "enable_memory_saver": "rollout.free_cache_engine",
    "random_seed": "rollout.seed",
    "trust_remote_code": "actor_rollout_ref.model.trust_remote_code",
    "skip_tokenizer_init": "(always true: token in / token out)",
}


def check_config(config: Any) -> None:
    """Raise ``ValueError`` listing every rollout setting the SGLang rollout would not honour."""
    problems = []
    if int(config.tensor_model_parallel_size) != 1:
        problems.append(
            f"rollout.tensor_model_parallel_size={config.tensor_model_parallel_size}: one engine per training rank; set 1"
        )
    if config.micro_batch_size is not None:
        problems.append(
            f"rollout.micro_batch_size={config.micro_batch_size} is for the hf/native loops; set null"
        )
    if config.mode != "sync":
        problems.append(
            f"rollout.mode={config.mode!r}: the sglang rollout is written for the offline engine (sync)"
        )
    for key in (config.engine_kwargs or {}).get("sglang") or {}:
        if key in OWNED_KEYS:
            problems.append(
                f"rollout.engine_kwargs.sglang.{key} is set by {OWNED_KEYS[key]}; set that instead"
            )
    if config.calculate_log_probs and (
        float(config.temperature) != 1.0 or int(config.top_k) > 0 or float(config.top_p) < 1.0
    ):
        problems.append(
            "rollout.calculate_log_probs=true needs temperature=1, top_k=-1, top_p=1 with sglang: which distribution "
            "SGLang's output_token_logprobs describe otherwise has not been checked against the contract"
        )
    if problems:
        raise ValueError("sglang rollout config:\n" + "\n".join(f"  - {p}" for p in problems))


def engine_kwargs(config: Any, model_path: str, *, trust_remote_code: bool, seed: int) -> dict[str, Any]:
    """``sglang.Engine`` keyword arguments (ServerArgs names) from ``actor_rollout_ref.rollout``."""
    max_len = config.max_model_len
    if max_len is None:
        max_len = int(config.prompt_length) + int(config.response_length)
    kwargs = {
        "model_path": str(model_path),
        "dtype": str(config.dtype),
        "tp_size": int(config.tensor_model_parallel_size),
        "mem_fraction_static": float(config.gpu_memory_utilization),
        # SGLang turns chunked prefill off with a chunk size of -1
        "chunked_prefill_size": int(config.max_num_batched_tokens) if config.enable_chunked_prefill else -1,
        "context_length": int(max_len),
        "max_running_requests": int(config.max_num_seqs),
        "disable_cuda_graph": bool(config.enforce_eager),
        "disable_radix_cache": not bool(config.enable_prefix_caching),
        "load_format": str(config.load_format),
        "enable_memory_saver": bool(config.free_cache_engine),
        "random_seed": int(seed),
        "trust_remote_code": bool(trust_remote_code),
        "skip_tokenizer_init": True,
    }
    kwargs.update(dict((config.engine_kwargs or {}).get("sglang") or {}))
    return kwargs


def sampling_params(params: SamplingParams, stop_token_ids: list[int], *, ignore_eos: bool) -> dict[str, Any]:
    """SGLang's sampling-params dict for one call (greedy: temperature 0)."""
    return {
        "max_new_tokens": int(params.response_length),
        "temperature": float(params.temperature) if params.do_sample else 0.0,
        "top_k": int(params.top_k) if params.do_sample and params.top_k > 0 else -1,
        "top_p": float(params.top_p) if params.do_sample else 1.0,
        "stop_token_ids": [] if ignore_eos else list(stop_token_ids),
        "ignore_eos": bool(ignore_eos),
        "skip_special_tokens": False,
        "no_stop_trim": True,  # keep the stop token in output_ids (the contract keeps EOS in the response)
    }


def row_output(out: dict[str, Any], with_log_probs: bool) -> RowOutput:
    """One ``Engine.generate`` result (``output_ids``, ``meta_info``) as a :class:`RowOutput`."""
    ids = [int(t) for t in out["output_ids"]]
    meta = out["meta_info"]
    lps = None
    if with_log_probs:
        # entries are (logprob, token_id, text); the ids must line up with output_ids
        entries = meta["output_token_logprobs"]
        if [int(e[1]) for e in entries] != ids:
            raise ValueError(f"SGLang log-probs do not follow output_ids: {entries!r} vs {ids}")
        lps = [float(e[0]) for e in entries]
    return RowOutput(ids, lps, str(meta["finish_reason"]["type"]))


@register_rollout("sglang")
class SGLangRollout(BaseRollout):
    """SGLang engine with its own weights (see module doc; not run here)."""

    shares_trainer_weights = False

    def __init__(
        self, module: nn.Module, config: Any, tokenizer: Any = None, *, model_config: Any = None, **_: Any
    ):
        if model_config is None:
            raise ValueError("SGLangRollout needs model_config (actor_rollout_ref.model) for the model path")
        self.device_type = next(module.parameters()).device.type
        check_config(config)
        self.config = config
        self.eos_token_ids, self.pad_token_id = stop_and_pad_ids(module, tokenizer, "SGLangRollout")
        rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
        self.engine_kwargs = engine_kwargs(
            config,
            model_config.path,
            trust_remote_code=bool(model_config.trust_remote_code),
            seed=int(config.seed) + rank,
        )
        self.engine = self._make_engine(self.engine_kwargs)
        self.memory_saver = bool(self.engine_kwargs["enable_memory_saver"])
        self._resident = {"weights", "kv_cache"}
        self.release()

    def _make_engine(self, kwargs: dict[str, Any]) -> Any:
        if self.device_type != "cuda":
            raise ValueError(
                f"rollout.name=sglang needs a CUDA device (the actor is on {self.device_type!r}); SGLang's CPU engine "
                "needs Intel AMX and a source build. On CPU use rollout.name=vllm (envs/vllm-cpu), native or hf"
            )
        try:
            import sglang
        except ImportError as e:
            raise ImportError(
                "rollout.name=sglang needs SGLang: pip install 'verl-workers[sglang]' (GPU)"
            ) from e
        return sglang.Engine(**kwargs)

    def _resume(self, tags: list[str]) -> None:
        missing = [t for t in tags if t not in self._resident]
        if self.memory_saver and missing:
            self.engine.resume_memory_occupation(tags=missing)
            self._resident.update(missing)

    def resume(self) -> None:
        self._resume(["weights", "kv_cache"])

    def release(self) -> None:
        if self.memory_saver and self._resident:
            self.engine.release_memory_occupation(tags=sorted(self._resident))
            self._resident.clear()

    def load_weight_buckets(self, buckets: Iterable[WeightBucket]) -> int:
        """Each completed group of tensors goes to ``update_weights_from_tensor``; the cache is flushed
        once, after the last bucket."""
        from verl.workers.rollout.weight_sync import WeightBucketReceiver

        self._resume(["weights"])
        receiver = WeightBucketReceiver()
        loaded = 0
        for bucket in buckets:
            ready = receiver.receive(bucket)
            if ready:
                self.engine.update_weights_from_tensor(named_tensors=ready, flush_cache=False)
                loaded += len(ready)
        receiver.finish()
        self.engine.flush_cache()
        return loaded

    def update_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        self.engine.update_weights_from_tensor(named_tensors=list(weights), flush_cache=True)

    def generate_sequences(self, prompts: DataProto) -> DataProto:
        batch = prompts.batch
        params = sampling_params_for(self.config, prompts.meta_info)
        log_probs = bool(self.config.calculate_log_probs)
        if log_probs and params.temperature != 1.0:
            if not prompts.meta_info.get("validate", False):
                raise ValueError(
                    f"rollout.calculate_log_probs=true with temperature={params.temperature}: see check_config"
                )
            log_probs = False  # validation does not use them
        ids, mask, pos = batch["input_ids"], batch["attention_mask"], batch["position_ids"]
        outs = self.engine.generate(
            input_ids=prompt_rows(ids, mask),
            sampling_params=sampling_params(
                params, self.eos_token_ids, ignore_eos=bool(self.config.ignore_eos)
            ),
            return_logprob=log_probs,
        )
        tensors = assemble_batch(
            ids, mask, pos, [row_output(o, log_probs) for o in outs], self.pad_token_id, log_probs
        )
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            r = torch.tensor(
                [tensors["responses"].shape[1]], dtype=torch.int64, device=tensors["responses"].device
            )
            dist.all_reduce(r, op=dist.ReduceOp.MAX)
            tensors = pad_responses_to(tensors, int(r.item()), self.pad_token_id)
        from verl import DataProto

        return DataProto.from_dict(tensors=tensors)
