"""``rollout.name=vllm``: sampling through vLLM, colocated with the FSDP actor (hybrid engine).

Each training rank owns one engine (data parallel; ``tensor_model_parallel_size=1``) built from the
actor's model path: with upstream's default ``load_format=dummy`` vLLM starts from random weights and
the first generation after construction syncs the actor's weights (the worker's version counter
starts one behind). Weights then move after every actor update through
:func:`verl.workers.rollout.weight_sync.sync_weights`: buckets of the full state dict, sent to the
engine's worker as bytes (:mod:`.worker_extension`), never through disk.

Memory on GPU (``free_cache_engine``, vLLM sleep mode): after init and after each generation the engine
sleeps (level 1: weights to host memory, KV cache freed) so training has the device; a weight sync
wakes the weights only, generation wakes the KV cache too. vLLM has no sleep mode on CPU, where these
calls are skipped (its CPU worker would only log a warning).

Vision-language models (a config with ``image_token_id``): each row's ``multi_modal_data`` (the
dataset's ``{"image": [PIL, ...]}``) goes to vLLM with the prompt (``translate.vllm_prompts``); vLLM's
processor then needs the tokenizer loaded and, for Qwen2-VL-family models in vLLM 0.32 with
transformers 5, a torchvision that loads beside the installed torch (:func:`check_multimodal_support`).

LoRA (``rollout.lora_sync=adapter``): the engine starts with vLLM's LoRA path on (``enable_lora``,
``max_loras=1``, ``max_lora_rank``); the base weights arrive once (or come from disk with a real
``load_format``) and after every update only the adapter, in peft's layout, through
:meth:`VLLMRollout.load_lora_adapter`; every request then samples with it (a ``LoRARequest``).

Outputs follow docs/contracts.md; ``rollout_log_probs`` come from vLLM's sampler in the mode that
equals ``log_softmax(logits / temperature)`` at the sampled token (see :mod:`.translate`).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from torch import nn
from verl.workers.rollout.base import BaseRollout, register_rollout
from verl.workers.rollout.hf_rollout import sampling_params_for, stop_and_pad_ids
from verl.workers.rollout.native_rollout import pad_responses_to
from verl.workers.rollout.vllm_rollout import translate
from verl.workers.rollout.vllm_rollout.worker_extension import metas_to_wire

if TYPE_CHECKING:
    from verl import DataProto
    from verl.workers.rollout.weight_sync import WeightBucket


def _rank() -> int:
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def placeholder_ids(model_config: Any) -> dict[str, int]:
    """modality -> placeholder token id of a vision-language model's config (empty for a text model)."""
    out = {}
    for modality, attr in translate.MODALITY_TOKENS.items():
        value = getattr(model_config, attr, None)
        if value is not None:
            out[modality] = int(value)
    return out


def check_multimodal_support() -> None:
    """vLLM 0.32's Qwen2-VL path needs torchvision three times over (measured with transformers 5.19):
    its model module imports transformers' torchvision-backed ``image_processing_qwen2_vl`` while vLLM
    inspects the architecture; it builds the full ``Qwen2VLProcessor``, whose video processor exists only
    with torchvision; and it reads that video processor's kwargs. Without torchvision vLLM only says the
    architecture "failed to be inspected"; say what is missing instead."""
    try:
        import torchvision  # noqa: F401
    except Exception as e:  # ImportError, or a CUDA build's ops failing to register beside a CPU torch
        raise RuntimeError(
            "rollout.name=vllm with a vision-language model needs torchvision: vLLM's Qwen2-VL-family model "
            "modules and processors (image and video) are transformers' torchvision-based ones. torchvision "
            f"failed to import ({type(e).__name__}: {e}); install the torchvision build that matches this "
            "torch (on CPU, torchvision==<version>+cpu from PyTorch's CPU wheel index; PyPI's wheels are CUDA "
            "builds) and save the model's full processor (with its video processor), or use rollout.name=hf, "
            "which generates with pixel inputs"
        ) from e


def adapter_rank(config: Any, model_config: Any) -> int:
    """The rank of the adapter the engine will receive (0: it receives merged weights, no LoRA path)."""
    if config.lora_sync != "adapter":
        return 0
    if int(model_config.lora_rank or 0) > 0:
        return int(model_config.lora_rank)
    import json
    import os

    # a run started from lora_adapter_path with lora_rank=0: the adapter's own config says
    with open(os.path.join(str(model_config.lora_adapter_path), "adapter_config.json")) as f:
        return int(json.load(f)["r"])


@register_rollout("vllm")
class VLLMRollout(BaseRollout):
    """vLLM engine with its own weights. ``config`` is ``actor_rollout_ref.rollout``; ``model_config``
    is ``actor_rollout_ref.model`` (path, trust_remote_code); ``module`` is the actor's module, read
    for its generation config and device only."""

    shares_trainer_weights = False

    def __init__(
        self, module: nn.Module, config: Any, tokenizer: Any = None, *, model_config: Any = None, **_: Any
    ):
        if model_config is None:
            raise ValueError("VLLMRollout needs model_config (actor_rollout_ref.model) for the model path")
        translate.check_config(config)
        self.config = config
        self.eos_token_ids, self.pad_token_id = stop_and_pad_ids(module, tokenizer, "VLLMRollout")
        self.device_type = next(module.parameters()).device.type
        self.seed = int(config.seed) + _rank()
        #: modality -> placeholder id; non-empty for a vision-language model, whose placeholders are never sampled
        self.placeholders = placeholder_ids(getattr(module, "config", None))
        self.suppress_ids = sorted(set(self.placeholders.values()))
        if self.placeholders:
            check_multimodal_support()
        self.engine_kwargs = translate.engine_kwargs(
            config,
            model_config.path,
            trust_remote_code=bool(model_config.trust_remote_code),
            device_type=self.device_type,
            seed=self.seed,
            multimodal=bool(self.placeholders),
            lora_rank=adapter_rank(config, model_config),
        )
        #: the adapter every request samples with (rollout.lora_sync=adapter), and its id counter
        self.lora_request: Any = None
        self._lora_ids = 0
        self.logprobs_mode = self.engine_kwargs["logprobs_mode"]
        from verl.workers.rollout.vllm_rollout.engines import AsyncEngine, SyncEngine

        self.engine = (AsyncEngine if config.mode == "async" else SyncEngine)(self.engine_kwargs)
        self.sleep_mode = bool(self.engine_kwargs["enable_sleep_mode"])
        self._awake = {"weights", "kv_cache"}
        self._warned: set[str] = set()
        self.release()  # training runs first: give the device back until the first generation

    # ------------------------------------------------------------------ memory (GPU sleep mode)
    def _wake(self, tags: list[str]) -> None:
        missing = [t for t in tags if t not in self._awake]
        if self.sleep_mode and missing:
            self.engine.wake_up(missing)
            self._awake.update(missing)

    def resume(self) -> None:
        self._wake(["weights", "kv_cache"])

    def release(self) -> None:
        if self.sleep_mode and self._awake:
            self.engine.sleep(level=1)
            self._awake.clear()

    # ------------------------------------------------------------------ weights
    def load_weight_buckets(self, buckets: Iterable[WeightBucket]) -> int:
        """Send each bucket's bytes and metadata to the engine's worker, which loads whole layers."""
        self._wake(["weights"])
        self.engine.collective_rpc("verl_begin_weight_update")
        for bucket in buckets:
            self.engine.collective_rpc(
                "verl_receive_bucket", (bucket.buffer.numpy().tobytes(), metas_to_wire(bucket.metas))
            )
        loaded = self.engine.collective_rpc("verl_finish_weight_update")[0]
        self.engine.reset_prefix_cache()  # cached KV blocks were computed with the old weights
        return int(loaded)

    # ------------------------------------------------------------------ disaggregated pools
    def join_weight_group(self, host: str, port: int, rank: int, size: int, backend: str) -> None:
        """Make the engine's worker a member of the trainer's weight-sync group (``weight_group``):
        the buckets then go from the trainer's device to the engine's without this process in between."""
        self.engine.collective_rpc("verl_join_weight_group", (host, port, rank, size, backend))

    def receive_weights(self) -> int:
        """Load the weights the trainer broadcasts over the group now; returns the tensors loaded."""
        self._wake(["weights"])
        return self._loaded(self.engine.collective_rpc("verl_receive_weights"))

    def start_receive(self) -> None:
        """Receive the next broadcast in the engine's worker in the background, while requests continue."""
        self.engine.collective_rpc("verl_start_receive")

    def finish_receive(self) -> int:
        """Load what :meth:`start_receive` received (call while no request is in flight, e.g. paused)."""
        self._wake(["weights"])
        return self._loaded(self.engine.collective_rpc("verl_finish_receive"))

    def _loaded(self, per_worker: list) -> int:
        self.engine.reset_prefix_cache()  # cached KV blocks were computed with the old weights
        return int(per_worker[0])

    def submit(self, prompt_ids: list[int], params: Any, request_id: str) -> Any:
        """Start one request (``params``: :class:`~verl.workers.rollout.hf_rollout.SamplingParams`) on the
        async engine and return at once: a ``concurrent.futures.Future`` of its
        :class:`~.translate.RowOutput`, whose ``versions`` say which weights made each token (the request
        survives :meth:`pause_generation` / :meth:`resume_generation`)."""
        if self.config.mode != "async":
            raise RuntimeError("streaming requests need the async engine: set rollout.mode=async")
        log_probs = self.wants_log_probs(params, validate=False)
        request = translate.vllm_prompts([list(prompt_ids)], None, self.placeholders)[0]
        return self.engine.submit(
            request, self.vllm_sampling_params(params, log_probs), log_probs, request_id, self.lora_request
        )

    def pause_generation(self) -> int:
        """Abort the requests in flight, keeping what they generated; returns how many there were."""
        return self.engine.pause()

    def resume_generation(self, version: int) -> None:
        """Continue the paused requests under the weights loaded meanwhile (``version``)."""
        self.engine.resume(version)

    def load_lora_adapter(self, adapter_dir: str) -> None:
        """Make the peft adapter in ``adapter_dir`` the one every later request samples with. vLLM reads
        the folder during this call and may read it again later (after a weight reload), so the caller
        keeps it until the next adapter replaces it; each load gets a new id, and the previous adapter is
        removed first (``max_loras=1``)."""
        if not self.engine_kwargs.get("enable_lora"):
            raise RuntimeError(
                "this vLLM engine was started without LoRA: set actor_rollout_ref.rollout.lora_sync=adapter "
                "(with actor_rollout_ref.model.lora_rank > 0)"
            )
        from vllm.lora.request import LoRARequest

        self._wake(["weights"])
        if self.lora_request is not None:
            self.engine.remove_lora(self.lora_request.lora_int_id)
        self._lora_ids += 1
        request = LoRARequest(
            lora_name=f"verl_actor_v{self._lora_ids}", lora_int_id=self._lora_ids, lora_path=str(adapter_dir)
        )
        if not self.engine.add_lora(request):
            raise RuntimeError(f"vLLM did not load the LoRA adapter in {adapter_dir}")
        self.lora_request = request
        self.engine.reset_prefix_cache()  # cached KV blocks were computed with the old adapter

    def update_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Load ``(name, tensor)`` pairs (one bucket holding them all)."""
        from verl.workers.rollout.weight_sync import iter_weight_buckets

        weights = list(weights)
        size = sum(t.numel() * t.element_size() + 16 for _, t in weights) + 16
        self.load_weight_buckets(iter_weight_buckets(weights, size))

    # ------------------------------------------------------------------ sampling
    def request_sampling_kwargs(
        self, params: Any, log_probs: bool, stop_token_ids: list[int] | None = None
    ) -> dict[str, Any]:
        """``vllm.SamplingParams`` keyword arguments of one call, for the synchronous and the async path
        alike: a vision-language model's placeholder tokens are never sampled on either."""
        return translate.sampling_kwargs(
            params,
            self.eos_token_ids if stop_token_ids is None else stop_token_ids,
            ignore_eos=bool(self.config.ignore_eos),
            log_probs=log_probs,
            suppress_ids=self.suppress_ids,
        )

    def vllm_sampling_params(self, params: Any, log_probs: bool) -> Any:
        from vllm import SamplingParams

        return SamplingParams(**self.request_sampling_kwargs(params, log_probs))

    def wants_log_probs(self, params: Any, validate: bool) -> bool:
        """Whether this call returns ``rollout_log_probs``; an error when they are needed for training
        but vLLM cannot report the contract's values for these sampling settings."""
        if not self.config.calculate_log_probs:
            return False
        reason = translate.log_probs_unavailable(params, self.logprobs_mode)
        if reason is None:
            return True
        if validate:
            # validation never uses them; say once that these batches carry none
            if reason not in self._warned:
                self._warned.add(reason)
                warnings.warn(
                    f"vllm rollout: validation batches carry no rollout_log_probs ({reason})", stacklevel=3
                )
            return False
        raise ValueError(
            f"rollout.calculate_log_probs=true, but vLLM cannot report log_softmax(logits / temperature) for "
            f"{reason}; use temperature=1 or sample without top-k/top-p, or calculate_log_probs=false"
        )

    def generate_sequences(self, prompts: DataProto) -> DataProto:
        batch = prompts.batch
        params = sampling_params_for(self.config, prompts.meta_info)
        log_probs = self.wants_log_probs(params, bool(prompts.meta_info.get("validate", False)))
        input_ids, attention_mask, position_ids = (
            batch["input_ids"],
            batch["attention_mask"],
            batch["position_ids"],
        )
        rows = translate.prompt_rows(input_ids, attention_mask)
        requests = translate.vllm_prompts(
            rows, prompts.non_tensor_batch.get("multi_modal_data"), self.placeholders
        )
        outputs = self.engine.generate(
            requests, self.vllm_sampling_params(params, log_probs), log_probs, lora_request=self.lora_request
        )
        if self.placeholders:
            translate.check_prompt_lengths(rows, outputs)
        tensors = translate.assemble_batch(
            input_ids, attention_mask, position_ids, outputs, self.pad_token_id, log_probs
        )
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            # engines decode independently; the batch keeps one R across data-parallel ranks
            r = torch.tensor(
                [tensors["responses"].shape[1]], dtype=torch.int64, device=tensors["responses"].device
            )
            dist.all_reduce(r, op=dist.ReduceOp.MAX)
            tensors = pad_responses_to(tensors, int(r.item()), self.pad_token_id)
        from verl import DataProto

        return DataProto.from_dict(tensors=tensors)

    # ------------------------------------------------------------------ async (agent loops)
    async def agenerate(
        self,
        prompt_ids: list[int],
        params: Any,
        request_id: str,
        stop_token_ids: list[int] | None = None,
        multi_modal_data: dict[str, list] | None = None,
    ) -> translate.RowOutput:
        """One token-in / token-out request with log-probs through the async engine (``rollout.mode=async``);
        ``params`` is a :class:`~verl.workers.rollout.hf_rollout.SamplingParams`; ``stop_token_ids``
        replace the EOS ids (agent loops also stop at the chat template's end of turn);
        ``multi_modal_data``: the request's images (``{"image": [PIL, ...]}``) for a vision-language model,
        with ``prompt_ids`` expanded as the dataset's processor expands them."""
        if self.config.mode != "async":
            raise RuntimeError("token-in/token-out requests need the async engine: set rollout.mode=async")
        reason = translate.log_probs_unavailable(params, self.logprobs_mode)
        if reason is not None:
            raise ValueError(f"request {request_id}: vLLM cannot report the sampling log-probs for {reason}")
        from vllm import SamplingParams

        kwargs = self.request_sampling_kwargs(params, True, stop_token_ids)
        rows = [list(prompt_ids)]
        request = translate.vllm_prompts(
            rows, None if multi_modal_data is None else [multi_modal_data], self.placeholders
        )
        out = await self.engine.agenerate(
            request[0], SamplingParams(**kwargs), True, request_id, lora_request=self.lora_request
        )
        if self.placeholders:
            translate.check_prompt_lengths(rows, [out])
        return out

    def shutdown(self) -> None:
        self.engine.shutdown()
