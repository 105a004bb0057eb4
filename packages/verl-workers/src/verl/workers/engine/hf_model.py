"""Loading Hugging Face models for training and the per-token outputs the actor and critic need."""

from __future__ import annotations

from typing import Any

import torch
from verl.utils.torch_functional import entropy_from_logits, logprobs_from_logits


def load_hf_model(model_config: Any, model_type: str, dtype: torch.dtype) -> torch.nn.Module:
    """``from_pretrained(model_config.path)`` as a causal LM, or for ``value`` as a token classifier
    with one label (a causal-LM checkpoint loads too: the backbone is reused, the head is new).
    ``dtype``: what to load the weights in (``fsdp_config.model_dtype``, see ``engine.precision``)."""
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
    sequences, see :mod:`verl.workers.engine.packing`)."""
    if "use_fused_kernels" in model_config and bool(model_config.use_fused_kernels):
        raise NotImplementedError("model.use_fused_kernels=True is not supported by the FSDP engines; set it to False")
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
) -> dict[str, torch.Tensor]:
    """Run ``module`` on ``input_ids`` / ``attention_mask`` / ``position_ids`` and keep the outputs of
    the last R positions that predict the response tokens (``responses`` is [B, R]). ``entropy_grad=False``
    computes the entropies without autograd. ``remove_padding`` runs the real tokens packed
    (:mod:`verl.workers.engine.packing`); outputs outside ``attention_mask`` are then 0.
    ``compute_dtype``: the dtype the forward runs in when it differs from the stored parameters'
    (mixed precision, see :mod:`verl.workers.engine.precision`)."""
    if remove_padding and micro_batch["position_ids"].dim() == 3:
        raise NotImplementedError(
            "model.use_remove_padding=True with M-RoPE (3-D) position ids of vision-language rows is not "
            "supported yet; set use_remove_padding=False"
        )
    if remove_padding:
        return _packed_response_outputs(
            module, micro_batch, model_type, temperature=temperature, calculate_entropy=calculate_entropy,
            entropy_grad=entropy_grad, compute_dtype=compute_dtype or module.dtype,
        )
    input_ids = micro_batch["input_ids"]
    responses = micro_batch["responses"]
    n_resp = responses.shape[-1]
    if input_ids.shape[-1] <= n_resp:
        raise ValueError(
            f"input_ids has {input_ids.shape[-1]} columns but responses has {n_resp}: input_ids must be "
            f"cat(prompts, responses) with at least one prompt column"
        )
    vision = {k: micro_batch[k] for k in ("pixel_values", "image_grid_thw") if k in micro_batch}
    out = module(
        input_ids=input_ids,
        attention_mask=micro_batch["attention_mask"],
        position_ids=model_position_ids(micro_batch["position_ids"]),
        use_cache=False,
        **vision,
    )
    # position t predicts token t+1: the response tokens are predicted by positions [-R-1, -1)
    logits = out.logits[:, -n_resp - 1 : -1]
    if model_type == "value":
        return {"values": logits[..., 0].float()}
    logits = logits.float() / temperature
    result = {"log_probs": logprobs_from_logits(logits, responses)}
    if calculate_entropy:
        # without a gradient the [B, R, V] intermediates are freed at once (entropy as a metric only)
        with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
            result["entropys"] = entropy_from_logits(logits)
    return result


def _packed_response_outputs(
    module: torch.nn.Module, micro_batch: Any, model_type: str, *, temperature: float,
    calculate_entropy: bool, entropy_grad: bool, compute_dtype: torch.dtype,
) -> dict[str, torch.Tensor]:
    from verl.workers.engine.packing import bin_width, block_causal_mask, plan_packing, response_index

    input_ids, attention_mask = micro_batch["input_ids"], micro_batch["attention_mask"]
    responses = micro_batch["responses"]
    impl = module.config._attn_implementation
    if impl not in ("sdpa", "eager"):
        raise NotImplementedError(
            f"model.use_remove_padding=True packs sequences with an explicit block-diagonal mask, which "
            f"attn_implementation={impl!r} does not take; use sdpa or eager, or use_remove_padding=False"
        )
    longest = int(attention_mask.sum(-1).max())
    plan = plan_packing(input_ids, attention_mask, width=bin_width(module.config, longest))
    mask = block_causal_mask(plan.segment, None if impl == "sdpa" else compute_dtype)
    out = module(input_ids=plan.input_ids, attention_mask=mask, position_ids=plan.position_ids, use_cache=False)
    bins, cols, valid = response_index(plan, attention_mask, responses.shape[-1])
    logits = out.logits[bins, cols]  # [B, R, V]: the packed outputs that predict each response token
    if model_type == "value":
        return {"values": logits[..., 0].float().masked_fill(~valid, 0.0)}
    logits = logits.float() / temperature
    result = {"log_probs": logprobs_from_logits(logits, responses).masked_fill(~valid, 0.0)}
    if calculate_entropy:
        with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
            result["entropys"] = entropy_from_logits(logits).masked_fill(~valid, 0.0)
    return result
