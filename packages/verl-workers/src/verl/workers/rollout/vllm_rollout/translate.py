"""What the vLLM rollout asks of vLLM, derived from ``actor_rollout_ref.rollout``: no vLLM import here,
so the translation is tested in the main environment (which never installs vLLM).

- :func:`engine_kwargs`: the ``vllm.LLM`` / ``AsyncEngineArgs`` keyword arguments, every rollout key
  the engine reads passed through under vLLM's name; keys it cannot honour are refused by
  :func:`check_config` with what to use instead.
- :func:`logprobs_mode` and :func:`log_probs_unavailable`: which of vLLM's log-prob modes gives the
  contract's ``rollout_log_probs`` (``log_softmax(logits / temperature)`` at the sampled token,
  unfiltered by top-k/top-p; docs/contracts.md), and when no mode can.
- :func:`sampling_kwargs`: one call's :class:`~verl.workers.rollout.hf_rollout.SamplingParams` as
  ``vllm.SamplingParams`` keyword arguments.
- :func:`prompt_rows` / :func:`assemble_batch`: left-padded prompt tensors to token lists and vLLM's
  per-row outputs back to the contract's tensors.
- :func:`vllm_prompts`: vision-language rows as vLLM prompt dicts (``prompt_token_ids`` with one
  placeholder per image, ``multi_modal_data`` with the row's PIL images); vLLM's own processor expands
  the placeholders again, and :func:`check_prompt_lengths` holds it to the dataset's expansion.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from verl.trainer.config.lora import VLLM_MAX_LORA_RANKS
from verl.workers.rollout.base import generation_tensors
from verl.workers.rollout.hf_rollout import SamplingParams

WORKER_EXTENSION = "verl.workers.rollout.vllm_rollout.worker_extension.VerlWorkerExtension"

#: engine keyword -> the rollout key that sets it (engine_kwargs.vllm may not set these again)
OWNED_KEYS = {
    "model": "actor_rollout_ref.model.path",
    "dtype": "rollout.dtype",
    "tensor_parallel_size": "rollout.tensor_model_parallel_size",
    "gpu_memory_utilization": "rollout.gpu_memory_utilization",
    "max_num_batched_tokens": "rollout.max_num_batched_tokens",
    "max_model_len": "rollout.max_model_len",
    "max_num_seqs": "rollout.max_num_seqs",
    "enforce_eager": "rollout.enforce_eager",
    "enable_chunked_prefill": "rollout.enable_chunked_prefill",
    "enable_prefix_caching": "rollout.enable_prefix_caching",
    "load_format": "rollout.load_format",
    "enable_sleep_mode": "rollout.free_cache_engine",
    "seed": "rollout.seed",
    "trust_remote_code": "actor_rollout_ref.model.trust_remote_code",
    "logprobs_mode": "rollout.calculate_log_probs with rollout.temperature/top_k/top_p",
    "skip_tokenizer_init": "(true for text models: token in / token out; vLLM's multimodal processors need the tokenizer)",
    "worker_extension_cls": "(the rollout's weight-sync extension)",
    "enable_lora": "actor_rollout_ref.rollout.lora_sync=adapter",
    "max_loras": "(1 with rollout.lora_sync=adapter: the actor's one adapter)",
    "max_lora_rank": "actor_rollout_ref.model.lora_rank (rounded up to a rank vLLM allows)",
}


def vllm_max_lora_rank(rank: int) -> int:
    """The smallest rank vLLM accepts as ``max_lora_rank`` that holds an adapter of rank ``rank``."""
    for allowed in VLLM_MAX_LORA_RANKS:
        if rank <= allowed:
            return allowed
    raise ValueError(f"LoRA rank {rank} exceeds vLLM's largest max_lora_rank {VLLM_MAX_LORA_RANKS[-1]}")


#: top-level engine_kwargs keys the workers read (the rest belongs under engine_kwargs.vllm)
ENGINE_KWARGS_SECTIONS = ("vllm", "sglang", "update_weights_bucket_megabytes")

LOGPROBS_RAW = "raw_logprobs"
LOGPROBS_PROCESSED = "processed_logprobs"


def _filters(top_k: int, top_p: float) -> bool:
    return int(top_k) > 0 or float(top_p) < 1.0


def vllm_section(config: Any) -> dict[str, Any]:
    """``rollout.engine_kwargs.vllm`` as a plain dict."""
    return dict((config.engine_kwargs or {}).get("vllm") or {})


def check_config(config: Any) -> None:
    """Raise ``ValueError`` listing every rollout setting the vLLM rollout would not honour."""
    problems = []
    if int(config.tensor_model_parallel_size) != 1:
        problems.append(
            f"rollout.tensor_model_parallel_size={config.tensor_model_parallel_size}: the vllm rollout runs one "
            "engine per training rank (data parallel, colocated with the FSDP actor); tensor parallelism "
            "inside the rollout is not implemented, set it to 1"
        )
    if config.micro_batch_size is not None:
        problems.append(
            f"rollout.micro_batch_size={config.micro_batch_size} splits prompts for the hf/native decode loops; "
            "vLLM schedules its own batches (rollout.max_num_seqs, rollout.max_num_batched_tokens): set it to null"
        )
    if config.mode not in ("sync", "async"):
        problems.append(
            f"rollout.mode={config.mode!r}: the vllm rollout runs 'sync' (LLM) or 'async' (AsyncLLM)"
        )
    for key in config.engine_kwargs or {}:
        if key not in ENGINE_KWARGS_SECTIONS:
            problems.append(
                f"rollout.engine_kwargs.{key}: not read by any engine; vLLM options go under "
                f"rollout.engine_kwargs.vllm.{key}"
            )
    for key in vllm_section(config):
        if key in OWNED_KEYS:
            problems.append(f"rollout.engine_kwargs.vllm.{key} is set by {OWNED_KEYS[key]}; set that instead")
    if (
        config.calculate_log_probs
        and float(config.temperature) != 1.0
        and _filters(config.top_k, config.top_p)
    ):
        problems.append(
            f"rollout.calculate_log_probs=true with temperature={config.temperature}, top_k={config.top_k}, "
            f"top_p={config.top_p}: vLLM reports log-probs either before temperature or after temperature AND "
            "top-k/top-p filtering, never log_softmax(logits / temperature) unfiltered (docs/contracts.md); "
            "use temperature=1, or top_k=-1 and top_p=1, or calculate_log_probs=false"
        )
    if problems:
        raise ValueError("vllm rollout config:\n" + "\n".join(f"  - {p}" for p in problems))


def logprobs_mode(config: Any) -> str:
    """The engine's log-prob mode: after temperature (``processed``) unless training samples with
    top-k/top-p filters, whose processed log-probs are renormalised over the kept tokens (``raw``)."""
    return LOGPROBS_RAW if _filters(config.top_k, config.top_p) else LOGPROBS_PROCESSED


def log_probs_unavailable(params: SamplingParams, mode: str) -> str | None:
    """Why the engine's log-probs for a call with ``params`` are not the contract's (None when they are)."""
    t = float(params.temperature)
    if not params.do_sample:
        # vLLM's greedy path never applies a temperature, in either mode
        return (
            None if t == 1.0 else f"greedy decoding with temperature={t} (vLLM reports log_softmax(logits))"
        )
    if mode == LOGPROBS_RAW:
        return None if t == 1.0 else f"temperature={t} with an engine reporting raw log-probs"
    if _filters(params.top_k, params.top_p):
        return f"top_k={params.top_k}/top_p={params.top_p} filtering (vLLM renormalises over the kept tokens)"
    return None


def engine_kwargs(
    config: Any,
    model_path: str,
    *,
    trust_remote_code: bool,
    device_type: str,
    seed: int,
    multimodal: bool = False,
    lora_rank: int = 0,
) -> dict[str, Any]:
    """Keyword arguments for ``vllm.LLM`` / ``AsyncEngineArgs`` (call :func:`check_config` first).
    ``multimodal``: a vision-language model, whose vLLM processor needs the tokenizer loaded.
    ``lora_rank``: the actor's adapter rank when it arrives as an adapter (``rollout.lora_sync=adapter``)."""
    max_model_len = config.max_model_len
    if max_model_len is None:
        max_model_len = int(config.prompt_length) + int(config.response_length)
    kwargs = {
        "model": str(model_path),
        "dtype": str(config.dtype),
        "tensor_parallel_size": int(config.tensor_model_parallel_size),
        "gpu_memory_utilization": float(config.gpu_memory_utilization),
        "max_num_batched_tokens": int(config.max_num_batched_tokens),
        "max_model_len": int(max_model_len),
        "max_num_seqs": int(config.max_num_seqs),
        "enforce_eager": bool(config.enforce_eager),
        "enable_chunked_prefill": bool(config.enable_chunked_prefill),
        "enable_prefix_caching": bool(config.enable_prefix_caching),
        "load_format": str(config.load_format),
        # vLLM has no sleep mode on CPU (its CPU worker only logs a warning): nothing to free there
        "enable_sleep_mode": bool(config.free_cache_engine) and device_type == "cuda",
        "seed": int(seed),
        "trust_remote_code": bool(trust_remote_code),
        "logprobs_mode": logprobs_mode(config),
        "skip_tokenizer_init": not multimodal,
        "worker_extension_cls": WORKER_EXTENSION,
    }
    if lora_rank > 0:
        # one adapter at a time, the actor's current one (upstream verl's max_loras=1)
        kwargs.update(enable_lora=True, max_loras=1, max_lora_rank=vllm_max_lora_rank(int(lora_rank)))
    kwargs.update(vllm_section(config))
    return kwargs


#: vLLM clamps logit_bias to [-100, 100]; -100 makes a token practically unsampleable (e^-100)
SUPPRESS_BIAS = -100.0


def sampling_kwargs(
    params: SamplingParams,
    stop_token_ids: Sequence[int],
    *,
    ignore_eos: bool,
    log_probs: bool,
    suppress_ids: Sequence[int] = (),
) -> dict[str, Any]:
    """``vllm.SamplingParams`` keyword arguments for one call.

    No per-request ``seed``: vLLM would give every request the same stream, so the ``n`` copies of a
    prompt would sample the same response. Requests draw from the engine's seeded generator instead.
    ``suppress_ids``: a vision-language model's placeholder tokens, as in the HF rollout: a sampled
    ``<|image_pad|>`` would be an image slot without pixels in the actor's next forward. vLLM applies
    ``logit_bias`` before its processed log-probs, as the HF rollout masks before its log-softmax.
    """
    out = {
        "n": 1,
        "max_tokens": int(params.response_length),
        "temperature": float(params.temperature) if params.do_sample else 0.0,
        "top_k": int(params.top_k) if params.do_sample and params.top_k > 0 else 0,
        "top_p": float(params.top_p) if params.do_sample else 1.0,
        "stop_token_ids": [] if ignore_eos else [int(t) for t in stop_token_ids],
        "ignore_eos": bool(ignore_eos),
        "logprobs": 0 if log_probs else None,
        "detokenize": False,
    }
    if len(suppress_ids):
        out["logit_bias"] = {int(t): SUPPRESS_BIAS for t in suppress_ids}
    return out


def prompt_rows(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> list[list[int]]:
    """The real tokens of each left-padded prompt row."""
    return [ids[mask.bool()].tolist() for ids, mask in zip(input_ids, attention_mask)]


def collapse_placeholders(ids: Sequence[int], placeholder_ids: Sequence[int]) -> list[int]:
    """``ids`` with every run of one placeholder token cut to a single token: the dataset's prompts carry
    each image expanded to its feature count, and vLLM's processor expands every placeholder it finds
    (an already expanded prompt would be expanded again)."""
    keep = set(int(t) for t in placeholder_ids)
    out: list[int] = []
    for t in ids:
        t = int(t)
        if t in keep and out and out[-1] == t:
            continue
        out.append(t)
    return out


#: multi_modal_data keys (the dataset's, upstream's) -> the placeholder config attribute of each modality
MODALITY_TOKENS = {"image": "image_token_id", "video": "video_token_id"}


def vllm_prompts(
    rows: Sequence[list[int]], multi_modal_data: Sequence[Any] | None, placeholder_ids: dict[str, int]
) -> list[dict[str, Any]]:
    """vLLM prompt dicts (``TokensPrompt``): ``{"prompt_token_ids": ids}`` for text rows and, for rows
    whose ``multi_modal_data`` holds images, ``{"prompt_token_ids": <one placeholder per image>,
    "multi_modal_data": {"image": [PIL, ...]}}``. ``placeholder_ids``: modality -> token id."""
    if multi_modal_data is None:
        return [{"prompt_token_ids": list(r)} for r in rows]
    if len(multi_modal_data) != len(rows):
        raise ValueError(f"{len(multi_modal_data)} multi_modal_data entries for {len(rows)} prompt rows")
    prompts = []
    for i, (ids, mm) in enumerate(zip(rows, multi_modal_data)):
        mm = {k: v for k, v in dict(mm or {}).items() if v is not None and len(v)}
        if not mm:
            prompts.append({"prompt_token_ids": list(ids)})
            continue
        unknown = sorted(set(mm) - set(placeholder_ids))
        if unknown:
            raise ValueError(
                f"row {i}: multi_modal_data has {unknown}; this model's placeholders cover {sorted(placeholder_ids)}"
            )
        collapsed = collapse_placeholders(ids, [placeholder_ids[k] for k in mm])
        for modality, items in mm.items():
            found = collapsed.count(placeholder_ids[modality])
            if found != len(items):
                raise ValueError(
                    f"row {i}: {len(items)} {modality} item(s) in multi_modal_data but {found} "
                    f"{modality} placeholder run(s) (token {placeholder_ids[modality]}) in the prompt"
                )
        prompts.append(
            {"prompt_token_ids": collapsed, "multi_modal_data": {k: list(v) for k, v in mm.items()}}
        )
    return prompts


def check_prompt_lengths(rows: Sequence[list[int]], outputs: Sequence[RowOutput]) -> None:
    """vLLM's expanded prompt must be the dataset's prompt: the actor scores the dataset's ids, so a
    different image resize in vLLM's processor would sample responses to another prompt."""
    for i, (ids, out) in enumerate(zip(rows, outputs)):
        if out.prompt_len is not None and out.prompt_len != len(ids):
            raise ValueError(
                f"row {i}: vLLM expanded the prompt to {out.prompt_len} tokens, the dataset's processor to "
                f"{len(ids)}: the two resize the images differently; give vLLM the same min_pixels/max_pixels "
                "(rollout.engine_kwargs.vllm.mm_processor_kwargs) as data.mm_processor_kwargs"
            )


@dataclass
class RowOutput:
    """One request's result: generated ids (with the stop token when one ended it) and their log-probs;
    ``prompt_len``: the engine's prompt length (after its multimodal expansion) when it reports one;
    ``versions``: the weights version that generated each token (engines that resume requests across
    weight updates report it; None elsewhere)."""

    token_ids: list[int]
    log_probs: list[float] | None
    finish_reason: str
    prompt_len: int | None = None
    versions: list[int] | None = None


def assemble_batch(
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    position_ids: torch.Tensor,
    outputs: Sequence[RowOutput],
    pad_token_id: int,
    with_log_probs: bool,
) -> dict[str, torch.Tensor]:
    """The contract's tensors from per-row outputs: responses right-padded to the longest, masks,
    positions continuing each prompt's last position, ``rollout_log_probs`` 0 outside the mask.
    ``position_ids`` is [B, P] or M-RoPE [B, 3, P]; each response token advances every axis by one."""
    n = input_ids.shape[0]
    if len(outputs) != n:
        raise ValueError(f"{len(outputs)} outputs for {n} prompt rows")
    r = max(1, max(len(o.token_ids) for o in outputs))
    device = input_ids.device
    responses = torch.full((n, r), pad_token_id, dtype=input_ids.dtype, device=device)
    mask = torch.zeros((n, r), dtype=attention_mask.dtype, device=device)
    log_probs = torch.zeros((n, r), dtype=torch.float32, device=device)
    for i, o in enumerate(outputs):
        k = len(o.token_ids)
        if k:
            responses[i, :k] = torch.tensor(o.token_ids, dtype=input_ids.dtype)
            mask[i, :k] = 1
        if with_log_probs:
            if o.log_probs is None or len(o.log_probs) != k:
                raise ValueError(f"row {i}: {k} tokens but log-probs {o.log_probs!r}")
            if k:
                log_probs[i, :k] = torch.tensor(o.log_probs, dtype=torch.float32)
    last = position_ids[..., -1:]
    resp_pos = last + torch.arange(1, r + 1, dtype=position_ids.dtype, device=device)
    return generation_tensors(
        input_ids, attention_mask, responses, mask, torch.cat([position_ids, resp_pos], dim=-1),
        log_probs if with_log_probs else None,
    )  # fmt: skip
