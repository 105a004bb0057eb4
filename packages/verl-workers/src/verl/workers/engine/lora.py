"""LoRA RL with ``peft`` (upstream keys ``actor_rollout_ref.model.{lora_rank, lora_alpha, target_modules,
exclude_modules, lora_adapter_path}``; ``lora_rank=0`` and no adapter path means off).

- The actor's engine wraps the loaded HF model with ``peft.get_peft_model`` (or loads a trained adapter
  from ``lora_adapter_path``, trainable): only the adapter matrices require grad, so the optimizer
  holds state for them alone.
- The reference policy is the same module with the adapters switched off (:class:`AdapterDisabledEngine`):
  no second copy of the weights.
- Rollouts get merged weights under the HF names (:meth:`LoraLayout.merge`): ``W + scaling * B @ A``
  is computed from the gathered state dict, so the training module is never merged and unmerged
  (which would leave rounding drift in the frozen weights).
- Or (``rollout.lora_sync=adapter``, vLLM) the rollout gets the base weights once
  (``merge(state, adapters=False)``) and then only the adapter, as a peft folder (:func:`save_adapter`).
- Checkpoints hold the adapter in peft's format (``lora_adapter/``: ``adapter_config.json`` +
  ``adapter_model.safetensors``), loadable with ``PeftModel.from_pretrained`` or as
  ``lora_adapter_path``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

#: the adapter's folder inside a checkpoint (upstream's name)
ADAPTER_DIR = "lora_adapter"
_PREFIX = "base_model.model."  # what PeftModel puts before the HF model's own parameter names
_ADAPTER = "default"  # peft's name for the one adapter we train


def lora_enabled(model_config: Any) -> bool:
    """True when ``model_config`` asks for LoRA (sections without the keys, like the critic's, never do)."""
    if "lora_rank" not in model_config:
        return False
    return int(model_config.lora_rank or 0) > 0 or model_config.lora_adapter_path is not None


def _peft():
    try:
        import peft
    except ImportError as e:
        raise ImportError(
            "actor_rollout_ref.model.lora_rank > 0 (or lora_adapter_path) needs peft: "
            "pip install 'verl-workers[lora]'"
        ) from e
    return peft


def _plain(value: Any) -> Any:
    """OmegaConf lists to Python lists (peft checks ``isinstance(x, list)``)."""
    from omegaconf import DictConfig, ListConfig, OmegaConf

    if isinstance(value, ListConfig | DictConfig):
        return OmegaConf.to_container(value, resolve=True)
    return value


def apply_lora(model: torch.nn.Module, model_config: Any) -> torch.nn.Module:
    """Wrap ``model`` as a trainable ``PeftModel`` as ``model_config`` says (base weights frozen)."""
    peft = _peft()
    if bool(model_config.enable_gradient_checkpointing):
        # frozen embeddings give checkpointed blocks an input without grad; upstream does the same
        model.enable_input_require_grads()
    path = model_config.lora_adapter_path
    if path is not None:
        peft_model = peft.PeftModel.from_pretrained(model, path, is_trainable=True)
    else:
        config = peft.LoraConfig(
            task_type=peft.TaskType.CAUSAL_LM,
            r=int(model_config.lora_rank),
            lora_alpha=int(model_config.lora_alpha),
            target_modules=_plain(model_config.target_modules),
            exclude_modules=_plain(model_config.exclude_modules),
            bias="none",
        )
        peft_model = peft.get_peft_model(model, config)
    cfg = peft_model.peft_config[_ADAPTER]
    if getattr(cfg, "use_dora", False) or cfg.bias != "none":
        raise NotImplementedError(
            f"the adapter at lora_adapter_path={path!r} uses DoRA or trains biases (bias={cfg.bias!r}); only plain "
            f"LoRA adapters (use_dora=false, bias='none') can be merged into the rollout's weights"
        )
    return peft_model


@dataclass(frozen=True)
class LoraLayout:
    """Where the adapters sit and how each merges: ``{module name: (scaling, fan_in_fan_out)}`` with
    module names as in the ``PeftModel``'s state dict (``base_model.model.<hf name>``)."""

    layers: dict[str, tuple[float, bool]]
    tied_embeddings: bool

    @classmethod
    def of(cls, peft_model: torch.nn.Module) -> LoraLayout:
        from peft.tuners.lora import LoraLayer

        layers = {}
        for name, mod in peft_model.named_modules():
            if isinstance(mod, LoraLayer) and _ADAPTER in mod.lora_A:
                layers[name] = (float(mod.scaling[_ADAPTER]), bool(getattr(mod, "fan_in_fan_out", False)))
        if not layers:
            raise ValueError(
                "LoRA is on but peft put no adapter on any module; check target_modules/exclude_modules"
            )
        tied = bool(getattr(peft_model.get_base_model().config, "tie_word_embeddings", False))
        return cls(layers=layers, tied_embeddings=tied)

    def merge(self, state: Mapping[str, torch.Tensor], adapters: bool = True) -> dict[str, torch.Tensor]:
        """The HF model's state dict (HF names) with every adapter merged into its base weight
        (``adapters=False``: the frozen base weights alone, for a rollout that applies the adapter itself).

        ``state`` is the PeftModel's full state dict; it is not modified (new tensors for merged weights)."""
        out: dict[str, torch.Tensor] = {}
        for key, value in state.items():
            if ".lora_A." in key or ".lora_B." in key:
                continue
            module, _, leaf = key.rpartition(".")
            if module.endswith(".base_layer"):
                owner = module[: -len(".base_layer")]
                if adapters and leaf == "weight" and owner in self.layers:
                    value = self._merged(owner, value, state)
                module = owner
            name = f"{module}.{leaf}".removeprefix(_PREFIX)
            out[name] = value
        if self.tied_embeddings:
            out.pop("lm_head.weight", None)  # the same tensor as embed_tokens: sent once
        return out

    def _merged(self, owner: str, weight: torch.Tensor, state: Mapping[str, torch.Tensor]) -> torch.Tensor:
        scaling, fan_in_fan_out = self.layers[owner]
        a = state[f"{owner}.lora_A.{_ADAPTER}.weight"].float()
        b = state[f"{owner}.lora_B.{_ADAPTER}.weight"].float()
        delta = (b @ a) * scaling
        if fan_in_fan_out:  # GPT-2's Conv1D stores weights transposed
            delta = delta.T
        return (weight.float() + delta).to(weight.dtype)


def adapter_state_dict(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The adapter tensors of a PeftModel state dict under peft's saved names (no adapter name)."""
    return {
        k.replace(f".{_ADAPTER}.", "."): v for k, v in state.items() if ".lora_A." in k or ".lora_B." in k
    }


def save_adapter(peft_model: torch.nn.Module, state: Mapping[str, torch.Tensor], out_dir: str) -> str:
    """Write ``adapter_config.json`` + ``adapter_model.safetensors`` (peft's layout) to ``out_dir``."""
    from safetensors.torch import save_file

    os.makedirs(out_dir, exist_ok=True)
    peft_model.peft_config[_ADAPTER].save_pretrained(out_dir)
    tensors = {k: v.detach().cpu().contiguous() for k, v in adapter_state_dict(state).items()}
    save_file(tensors, os.path.join(out_dir, "adapter_model.safetensors"), metadata={"format": "pt"})
    return out_dir


def broadcast_from_rank0(params: list[torch.nn.Parameter], device: torch.device) -> None:
    """Give every rank rank 0's values of freshly initialised parameters (LoRA's A matrices are random:
    without this each rank would start from its own seed)."""
    if not dist.is_initialized() or dist.get_world_size() == 1:
        return
    for p in params:
        buf = p.data.to(device)
        dist.broadcast(buf, src=0)
        p.data.copy_(buf.to(p.device))


def unwrap_peft(module: torch.nn.Module) -> torch.nn.Module:
    """The PeftModel inside an engine's module (FSDP1 wraps it; FSDP2 and one rank do not)."""
    from peft import PeftModel
    from torch.distributed.fsdp import FullyShardedDataParallel

    inner = module.module if isinstance(module, FullyShardedDataParallel) else module
    if not isinstance(inner, PeftModel):
        raise TypeError(f"expected a PeftModel inside the engine's module, got {type(inner).__name__}")
    return inner


class AdapterDisabledEngine:
    """The reference policy under LoRA: the actor's engine with its adapters switched off, i.e. the base
    model, computed on the actor's own (frozen) base weights. Inference only."""

    def __init__(self, actor_engine: Any):
        self._engine = actor_engine

    @contextmanager
    def _base_model(self):
        with unwrap_peft(self._engine.module).disable_adapter():
            yield

    def infer(self, micro_batches, **kwargs: Any) -> dict[str, torch.Tensor]:
        with self._base_model():
            return self._engine.infer(micro_batches, **kwargs)

    def forward_micro_batch(self, micro_batch, **kwargs: Any) -> dict[str, torch.Tensor]:
        with self._base_model(), torch.no_grad():
            return self._engine.forward_micro_batch(micro_batch, **kwargs)

    def __getattr__(self, name: str) -> Any:
        # sizes and flags the actor code reads (dp_rank, dp_size, dp_group, remove_padding, device, ...)
        if name in (
            "forward_backward",
            "optimizer_step",
            "lr_scheduler_step",
            "save_checkpoint",
            "load_checkpoint",
        ):
            raise RuntimeError(f"the LoRA reference policy is the actor's base model and cannot {name}")
        return getattr(self._engine, name)
