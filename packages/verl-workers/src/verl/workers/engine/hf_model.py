"""Loading Hugging Face models for training and the per-token outputs the actor and critic need."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import torch
from verl.utils.torch_functional import entropy_from_logits, logprobs_from_logits


def load_hf_model(model_config: Any, model_type: str, dtype: torch.dtype) -> torch.nn.Module:
    """``from_pretrained(model_config.path)`` as a causal LM, or for ``value`` as a token classifier
    with one label (a causal-LM checkpoint loads too: the backbone is reused, the head is new).
    ``dtype``: what to load the weights in (``fsdp_config.model_dtype``, see ``engine.precision``).
    ``model.external_lib`` (a module name) is imported first: it registers a custom architecture."""
    import_external_lib(model_config)
    from transformers import (
        AutoConfig,
        AutoModelForCausalLM,
        AutoModelForImageTextToText,
        AutoModelForTokenClassification,
    )

    path = model_config.path
    if path is None:
        raise ValueError("model.path is not set; give a local Hugging Face model folder")
    trust = bool(model_config.trust_remote_code)
    hf_config = AutoConfig.from_pretrained(path, trust_remote_code=trust)
    for key, value in dict(model_config.override_config or {}).items():
        setattr(hf_config, key, value)
    vision = is_vision_language(hf_config)
    if vision and model_type == "value":
        raise NotImplementedError(
            f"{path} is a vision-language model ({hf_config.model_type}); a value model (critic) on it is not "
            "supported yet: use a critic-free estimator (algorithm.adv_estimator=grpo)"
        )
    if model_type == "causal_lm":
        auto = AutoModelForImageTextToText if vision else AutoModelForCausalLM
        model = auto.from_pretrained(path, config=hf_config, dtype=dtype, trust_remote_code=trust)
    elif model_type == "value":
        hf_config.num_labels = 1
        hf_config.classifier_dropout = 0.0  # values must be deterministic in train mode
        model = AutoModelForTokenClassification.from_pretrained(
            path, config=hf_config, dtype=dtype, trust_remote_code=trust
        )
    else:
        raise ValueError(f"unknown model_type {model_type!r}; known: causal_lm, value")
    model.config.use_cache = False
    offload = "enable_activation_offload" in model_config and bool(model_config.enable_activation_offload)
    if model_config.enable_gradient_checkpointing:
        kwargs = {"use_reentrant": False}
        # transformers >= 5 renamed it and can keep the saved activations in host memory (offload)
        if getattr(model, "activation_checkpointing_enable", None) is not None:
            model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs, offload=offload)
        elif offload:
            raise NotImplementedError(
                "model.enable_activation_offload=True needs transformers >= 5 (activation_checkpointing_enable)"
            )
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    return model


def import_external_lib(model_config: Any) -> None:
    """Import ``model_config.external_lib`` when set (upstream's key: a module that registers a model)."""
    import importlib

    if "external_lib" in model_config and model_config.external_lib:
        importlib.import_module(str(model_config.external_lib))


def is_vision_language(hf_config: Any) -> bool:
    """The config describes an image-text-to-text model (it has a vision tower config)."""
    return getattr(hf_config, "vision_config", None) is not None


def freeze_vision_tower(model: torch.nn.Module) -> int:
    """Stop gradients into the vision tower (``model.model.visual`` in transformers' Qwen2-VL family);
    returns how many parameters were frozen. An error when the model has no vision tower."""
    visual = getattr(getattr(model, "model", model), "visual", None)
    if visual is None:
        raise ValueError(
            f"actor.freeze_vision_tower=True but {type(model).__name__} has no vision tower (model.visual)"
        )
    visual.requires_grad_(False)
    return sum(p.numel() for p in visual.parameters())


def vision_inputs(rows: Any, device: torch.device) -> dict[str, torch.Tensor]:
    """The model's vision kwargs for a micro-batch from its rows' ``multi_modal_inputs`` (one dict per
    row; empty for text-only rows): ``pixel_values`` and ``image_grid_thw`` concatenated in row order,
    which is the order the rows' image tokens appear in the flattened batch."""
    out: dict[str, list[torch.Tensor]] = {}
    for row in rows:
        for key in ("pixel_values", "image_grid_thw"):
            if row and key in row:
                out.setdefault(key, []).append(torch.as_tensor(row[key]))
    return {k: torch.cat(v, dim=0).to(device) for k, v in out.items()}


def model_position_ids(position_ids: torch.Tensor) -> torch.Tensor:
    """Position ids in the model's layout: [B, L] as is; M-RoPE ids stored per row as [B, 3, L] go to
    the model as [3, B, L]."""
    return position_ids.transpose(0, 1) if position_ids.dim() == 3 else position_ids


def check_model_flags(model_config: Any, device: torch.device) -> None:
    """Reject model flags this engine cannot honour, naming the key (``use_remove_padding`` packs
    sequences, see :mod:`verl.workers.engine.packing`; ``use_fused_kernels``: the chunked LM head of
    :mod:`verl.workers.engine.fused_logprob`; ``use_liger``: Liger's Triton kernels, GPU only)."""
    if "use_liger" in model_config and bool(model_config.use_liger):
        check_liger(device)
    if fused_backend(model_config) == "triton":
        check_triton(device)
    if "enable_activation_offload" in model_config and bool(model_config.enable_activation_offload):
        if device.type == "cpu":
            raise ValueError(
                "model.enable_activation_offload=True means nothing on CPU (activations already live in host "
                "memory); set it to False"
            )
        if not bool(model_config.enable_gradient_checkpointing):
            raise ValueError(
                "model.enable_activation_offload=True offloads the activations gradient checkpointing saves; "
                "set model.enable_gradient_checkpointing=True too"
            )


def fused_backend(model_config: Any) -> str:
    """``model.fused_kernel_options.impl_backend`` (torch when the section is absent)."""
    if "fused_kernel_options" not in model_config:
        return "torch"
    return str(model_config.fused_kernel_options.impl_backend)


def check_triton(device: torch.device | str) -> None:
    """``impl_backend=triton`` compiles Triton kernels for a CUDA device; ``TRITON_INTERPRET=1`` runs them
    on CPU tensors instead (how the tests check them)."""
    import importlib.util
    import os

    if importlib.util.find_spec("triton") is None:
        raise ValueError("model.fused_kernel_options.impl_backend=triton needs triton: pip install triton")
    if str(device).split(":")[0] != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
        raise ValueError(
            f"model.fused_kernel_options.impl_backend=triton compiles Triton kernels for a CUDA GPU; the device "
            f"is {device}. Use impl_backend=torch (same values), or TRITON_INTERPRET=1 to interpret them on CPU"
        )


def check_liger(device: torch.device | str) -> None:
    """``model.use_liger=True`` needs the ``liger-kernel`` package and a CUDA device (Triton kernels)."""
    import importlib.util

    if str(device).split(":")[0] != "cuda":
        raise ValueError(
            f"model.use_liger=True patches the model with Liger's Triton kernels, which need a CUDA GPU; the "
            f"device is {device}. Set model.use_liger=False (model.use_fused_kernels=True gives a chunked "
            "LM head + log-prob that runs on CPU)"
        )
    if importlib.util.find_spec("liger_kernel") is None:
        raise ValueError("model.use_liger=True needs the liger-kernel package: pip install liger-kernel")


def apply_liger(model: torch.nn.Module) -> None:
    """Swap the model's RMSNorm, RoPE, SwiGLU (and cross-entropy) for Liger's kernels, in place.

    ``_apply_liger_kernel_to_instance`` is what liger-kernel exposes for an already built model (the
    ``apply_liger_kernel_to_<arch>`` functions patch classes before loading); upstream verl calls it too.
    GPU only; never run in this repository's CPU tests.
    """
    from liger_kernel.transformers.monkey_patch import _apply_liger_kernel_to_instance

    _apply_liger_kernel_to_instance(model=model)


def install_fused_forward(model: torch.nn.Module, backend: str = "torch") -> None:
    """Give a causal LM a second forward mode: called with ``verl_fused=FusedRequest(...)`` it runs the
    backbone and returns ``(log_probs, entropy)`` through the chunked LM head
    (:func:`~verl.workers.engine.fused_logprob.fused_log_prob_entropy`) instead of logits.

    The mode lives in the module's own ``forward`` so the FSDP hooks around the root module (which
    gather the LM head's weight) run as for any forward; without ``verl_fused`` (generation) the
    original forward runs.
    """
    from verl.workers.engine.fused_logprob import fused_log_prob_entropy

    head = model.get_output_embeddings()
    if getattr(head, "bias", None) is not None:
        raise NotImplementedError(
            "model.use_fused_kernels=True: the LM head has a bias, which the fused kernel omits"
        )
    original = model.forward

    @functools.wraps(original)
    def forward(*args, verl_fused: FusedRequest | None = None, **kwargs):
        if verl_fused is None:
            return original(*args, **kwargs)
        hidden = model.get_decoder()(*args, **kwargs).last_hidden_state
        hidden = verl_fused.select(hidden)
        weight = head.weight
        if weight.dtype != hidden.dtype:  # mixed precision without FSDP (ComputeCast) casts on call only
            weight = weight.to(hidden.dtype)
        return fused_log_prob_entropy(
            hidden, weight, verl_fused.labels, verl_fused.temperature, backend=backend
        )

    model.forward = forward


@dataclass
class FusedRequest:
    """What the fused forward computes: log-probs of ``labels`` at the hidden states ``select`` picks."""

    select: Any  # hidden [B, S, H] -> hidden [..., H] matching labels
    labels: torch.Tensor
    temperature: float


def _identity(x: torch.Tensor) -> torch.Tensor:
    return x


@functools.cache
def _compiled(fn, backend: str):
    return torch.compile(fn, dynamic=True, backend=backend)


@dataclass(frozen=True)
class HeadOptions:
    """How the engine turns the last hidden states into per-token outputs."""

    fused: bool = False  # model.use_fused_kernels: chunked LM head, no [tokens, vocab] logits
    compile: bool = False  # actor.use_torch_compile: torch.compile the log-prob / entropy functions
    sp_group: Any = None  # the Ulysses group when ulysses_sequence_parallel_size > 1
    # actor.entropy_checkpointing: keep only the logits for the entropy's backward and recompute the
    # softmax there (torch.utils.checkpoint), instead of holding [tokens, vocab] intermediates
    checkpoint_entropy: bool = False


def _token_outputs(
    module,
    inputs: dict,
    model_type: str,
    select,
    labels: torch.Tensor,
    *,
    temperature: float,
    calculate_entropy: bool,
    entropy_grad: bool,
    head: HeadOptions,
    topk: int = 0,
    gather_ids: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """Per-token outputs at ``select(positions)``: values, or log-probs of ``labels`` (+ entropies, and the
    distillation outputs of `_distillation_outputs`)."""
    if model_type == "causal_lm" and head.fused and (topk or gather_ids is not None):
        raise NotImplementedError(
            "top-k log-probs (on-policy distillation) need the full logits, which the fused LM head "
            "(model.use_fused_kernels=true) never materialises; set use_fused_kernels=false"
        )
    if model_type == "causal_lm" and head.fused:
        log_probs, entropy = module(
            **inputs, use_cache=False, verl_fused=FusedRequest(select, labels, temperature)
        )
        result = {"log_probs": log_probs}
        if calculate_entropy:
            result["entropys"] = entropy if entropy_grad else entropy.detach()
        return result
    logits = select(module(**inputs, use_cache=False).logits)
    if model_type == "value":
        return {"values": logits[..., 0].float()}
    logits = logits.float()
    if temperature != 1.0:  # x / 1.0 is x: skip a [tokens, vocab] copy and its backward
        logits = logits / temperature
    with_grad = entropy_grad and torch.is_grad_enabled()
    extra = _distillation_outputs(logits, topk, gather_ids)
    if calculate_entropy and not with_grad and not head.compile:
        # the entropy as a metric: from the log-softmax the log-probs take anyway (one softmax pass
        # over [tokens, vocab] instead of two), without autograd
        logp = torch.log_softmax(logits, dim=-1)
        with torch.no_grad():
            entropy = entropy_from_log_probs(logp)
        return {"log_probs": logp.gather(-1, labels.unsqueeze(-1)).squeeze(-1), "entropys": entropy, **extra}
    if head.compile:
        from verl.workers.engine.compile import BACKEND

        logprob_fn, entropy_fn = _compiled(logprobs_from_logits, BACKEND), _compiled(entropy_from_logits, BACKEND)
    else:
        logprob_fn, entropy_fn = logprobs_from_logits, entropy_from_logits
    result = {"log_probs": logprob_fn(logits, labels)}
    if calculate_entropy:
        # without a gradient the [B, R, V] intermediates are freed at once (entropy as a metric only)
        with torch.set_grad_enabled(with_grad):
            result["entropys"] = entropy_of(logits, entropy_fn, checkpoint=head.checkpoint_entropy)
    return {**result, **extra}


def _distillation_outputs(logits: torch.Tensor, topk: int, gather_ids: torch.Tensor | None) -> dict[str, torch.Tensor]:
    """On-policy distillation's per-token outputs from ``logits`` [B, R, V] (already / temperature):
    a teacher's ``topk`` largest log-probs and their ids (``topk_log_probs``, ``topk_ids`` [B, R, k]), or
    the student's log-probs at the teacher's ids ``gather_ids`` [B, R, k] (``topk_log_probs``, with grad)."""
    if not topk and gather_ids is None:
        return {}
    logp = torch.log_softmax(logits, dim=-1)
    if gather_ids is not None:
        return {"topk_log_probs": logp.gather(-1, gather_ids.to(logp.device).long())}
    values, ids = logp.topk(int(topk), dim=-1)
    return {"topk_log_probs": values, "topk_ids": ids}


def entropy_from_log_probs(logp: torch.Tensor) -> torch.Tensor:
    """Entropy -sum(p log p) over the last dimension from log-probabilities (equals
    ``entropy_from_logits`` of the logits they came from)."""
    return -(logp.exp() * logp).sum(dim=-1)


def entropy_of(
    logits: torch.Tensor, entropy_fn=entropy_from_logits, *, checkpoint: bool = False
) -> torch.Tensor:
    """``entropy_fn(logits)``; with ``checkpoint`` (and autograd on) the softmax intermediates are not kept
    for backward but recomputed from ``logits`` there (upstream's ``entropy_checkpointing``)."""
    if checkpoint and torch.is_grad_enabled() and logits.requires_grad:
        return torch.utils.checkpoint.checkpoint(entropy_fn, logits, use_reentrant=False)
    return entropy_fn(logits)


def response_outputs(
    module: torch.nn.Module,
    micro_batch: Any,
    model_type: str,
    *,
    temperature: float = 1.0,
    calculate_entropy: bool = False,
    entropy_grad: bool = True,
    remove_padding: bool = False,
    compute_dtype: torch.dtype | None = None,
    head: HeadOptions = HeadOptions(),
    topk: int = 0,
    gather_ids: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """Run ``module`` on ``input_ids`` / ``attention_mask`` / ``position_ids`` and keep the outputs of
    the last R positions that predict the response tokens (``responses`` is [B, R]). ``entropy_grad=False``
    computes the entropies without autograd. ``remove_padding`` runs the real tokens packed
    (:mod:`verl.workers.engine.packing`); outputs outside ``attention_mask`` are then 0.
    ``compute_dtype``: the dtype the forward runs in when it differs from the stored parameters'
    (mixed precision, see :mod:`verl.workers.engine.precision`). ``head``: fused LM head, compiled
    log-prob functions, Ulysses sequence parallelism (which needs ``remove_padding``). ``topk`` /
    ``gather_ids`` [B, R, k]: on-policy distillation's top-k outputs (`_distillation_outputs`)."""
    kw = dict(
        temperature=temperature, calculate_entropy=calculate_entropy, entropy_grad=entropy_grad, head=head,
        topk=topk, gather_ids=gather_ids,
    )
    if remove_padding and micro_batch["position_ids"].dim() == 3:
        raise NotImplementedError(
            "model.use_remove_padding=True with M-RoPE (3-D) position ids of vision-language rows is not "
            "supported yet; set use_remove_padding=False"
        )
    if remove_padding:
        return _packed_response_outputs(
            module, micro_batch, model_type, compute_dtype=compute_dtype or module.dtype, **kw
        )
    if head.sp_group is not None:
        raise NotImplementedError("ulysses_sequence_parallel_size > 1 needs model.use_remove_padding=True")
    input_ids = micro_batch["input_ids"]
    responses = micro_batch["responses"]
    n_resp = responses.shape[-1]
    if input_ids.shape[-1] <= n_resp:
        raise ValueError(
            f"input_ids has {input_ids.shape[-1]} columns but responses has {n_resp}: input_ids must be "
            f"cat(prompts, responses) with at least one prompt column"
        )
    vision = {k: micro_batch[k] for k in ("pixel_values", "image_grid_thw") if k in micro_batch}
    if vision and head.fused:
        raise NotImplementedError(
            "model.use_fused_kernels=True runs the language model alone and cannot take image inputs; "
            "set use_fused_kernels=False for vision-language models"
        )
    inputs = dict(
        input_ids=input_ids,
        attention_mask=micro_batch["attention_mask"],
        position_ids=model_position_ids(micro_batch["position_ids"]),
        **vision,
    )

    # position t predicts token t+1: the response tokens are predicted by positions [-R-1, -1)
    def select(x):
        return x[:, -n_resp - 1 : -1]

    if model_type == "causal_lm" and not head.fused and _takes_logits_to_keep(module):
        # the LM head runs on those R+1 positions only, not on the prompt's (same values)
        inputs["logits_to_keep"] = n_resp + 1

        def select(x):
            return x[:, :-1]

    return _token_outputs(module, inputs, model_type, select, responses, **kw)


def _takes_logits_to_keep(module: torch.nn.Module) -> bool:
    """The model's forward slices the hidden states before its LM head (transformers' causal LMs; not
    wrappers whose forward takes ``**kwargs`` only, such as FSDP1's: those keep the full logits)."""
    import inspect

    return "logits_to_keep" in inspect.signature(module.forward).parameters


def _packed_response_outputs(
    module: torch.nn.Module,
    micro_batch: Any,
    model_type: str,
    *,
    temperature: float,
    calculate_entropy: bool,
    entropy_grad: bool,
    compute_dtype: torch.dtype,
    head: HeadOptions,
    topk: int = 0,
    gather_ids: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    from verl.workers.engine.packing import bin_width, block_causal_mask, plan_packing, response_index

    input_ids, attention_mask = micro_batch["input_ids"], micro_batch["attention_mask"]
    responses = micro_batch["responses"]
    impl = module.config._attn_implementation
    if impl not in ("sdpa", "eager", "verl_ulysses"):
        raise NotImplementedError(
            f"model.use_remove_padding=True packs sequences with an explicit block-diagonal mask, which "
            f"attn_implementation={impl!r} does not take; use sdpa or eager, or use_remove_padding=False"
        )
    longest = int(attention_mask.sum(-1).max())
    width = bin_width(module.config, longest)
    group = head.sp_group
    if group is not None:  # the packed width splits evenly over the sequence-parallel ranks
        sp = torch.distributed.get_world_size(group)
        width = -(-width // sp) * sp
    plan = plan_packing(input_ids, attention_mask, width=width)
    mask = block_causal_mask(plan.segment, None if impl != "eager" else compute_dtype)
    bins, cols, valid = response_index(plan, attention_mask, responses.shape[-1])
    kw = dict(
        temperature=temperature, calculate_entropy=calculate_entropy, entropy_grad=entropy_grad, head=head,
        topk=topk, gather_ids=gather_ids,
    )
    if group is not None and (topk or gather_ids is not None):
        raise NotImplementedError("top-k log-probs (on-policy distillation) with Ulysses sequence parallelism")
    if group is None:
        inputs = dict(input_ids=plan.input_ids, attention_mask=mask, position_ids=plan.position_ids)
        out = _token_outputs(module, inputs, model_type, lambda x: x[bins, cols], responses, **kw)
    else:
        # every packed position's output on this rank's slice, gathered, then picked like the above
        from verl.workers.engine.ulysses import active_group, gather_sequence, local_slice

        inputs = dict(
            input_ids=local_slice(plan.input_ids, group),
            attention_mask=mask,
            position_ids=local_slice(plan.position_ids, group),
        )
        labels = local_slice(torch.roll(plan.input_ids, -1, dims=1), group)
        with active_group(group):
            out = _token_outputs(module, inputs, model_type, _identity, labels, **kw)
        out = {k: gather_sequence(v, group, dim=1)[bins, cols] for k, v in out.items()}
    # [B, R] outputs and the [B, R, k] top-k ones
    return {k: v.masked_fill(~valid.view(*valid.shape, *[1] * (v.dim() - 2)), 0) for k, v in out.items()}
