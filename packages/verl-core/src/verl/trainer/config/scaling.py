"""Validation of the scaling options: Ulysses sequence parallelism and the kernel flags.

``*.ulysses_sequence_parallel_size`` (actor, ref, critic): the FSDP2 engine splits packed sequences
over that many ranks (all-to-all around attention); it must divide the workers, needs
``use_remove_padding`` and strategy ``fsdp2``. ``actor_rollout_ref.model.use_liger``: Liger's Triton
kernels need a CUDA device and the ``liger-kernel`` package. ``use_fused_kernels`` and
``actor.use_torch_compile`` are FSDP-engine options (the Megatron engine refuses them); compiled decoder
layers are fsdp2's, without Ulysses and without LoRA.
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from verl.trainer.config.derived import resolve_device
from verl.trainer.config.lora import lora_on

_ACTOR = "actor_rollout_ref.actor"


def check_scaling(cfg: DictConfig, problems: list[str], ws: int, critic: bool, ref: bool) -> None:
    arr = cfg.actor_rollout_ref
    roles = [(_ACTOR, arr.actor, arr.actor.strategy, "actor_rollout_ref.model", arr.model, f"{_ACTOR}.fsdp_config")]
    if ref:
        roles.append(("actor_rollout_ref.ref", arr.ref, arr.ref.strategy, "actor_rollout_ref.model", arr.model,
                      "actor_rollout_ref.ref.fsdp_config"))
    if critic:
        roles.append(("critic", cfg.critic, cfg.critic.strategy, "critic.model", cfg.critic.model,
                      "critic.model.fsdp_config"))
    for key, section, strategy, model_key, model, fsdp_key in roles:
        _check_sp(problems, ws, key, int(section.ulysses_sequence_parallel_size), strategy, model_key, model)
        if strategy in ("fsdp", "fsdp2"):
            _check_fsdp_size(problems, ws, fsdp_key, int(OmegaConf.select(cfg, f"{fsdp_key}.fsdp_size")), key, strategy)
    if bool(arr.model.use_liger):
        _check_liger(cfg, problems)
    # the engines refuse these for image inputs, but only at the first forward pass of a step
    vl_unsupported = {"use_remove_padding": "whose M-RoPE (3-D) position ids the packed forward does not support yet",
                      "use_fused_kernels": "which the fused kernels' language-model-only forward cannot take images into"}
    flags = [flag for flag in vl_unsupported if bool(arr.model[flag])]
    freeze = bool(arr.actor.freeze_vision_tower)
    vision = _has_vision_tower(arr.model.path) if flags or freeze else None
    if freeze and vision is False:
        problems.append(
            f"actor_rollout_ref.actor.freeze_vision_tower=true: the model at {arr.model.path} has no vision tower (its "
            "config.json has no vision_config); set it to false"
        )
    if vision:
        for flag in flags:
            problems.append(f"actor_rollout_ref.model.{flag}=true: the model at {arr.model.path} is a vision-language "
                            f"model, {vl_unsupported[flag]}; set it to false")
    if bool(arr.model.enable_activation_offload):
        key = "actor_rollout_ref.model.enable_activation_offload=true"
        if resolve_device(cfg) == "cpu":
            problems.append(f"{key} means nothing on CPU (activations already live in host memory); set it to false")
        elif not bool(arr.model.enable_gradient_checkpointing):
            problems.append(f"{key} offloads what gradient checkpointing saves; set "
                            "actor_rollout_ref.model.enable_gradient_checkpointing=true too")
    _check_fused_backend(cfg, problems)
    _check_compile(cfg, problems)
    if arr.actor.strategy == "megatron":
        for flag, value in (
            ("actor_rollout_ref.actor.use_torch_compile", arr.actor.use_torch_compile),
            ("actor_rollout_ref.model.use_liger", arr.model.use_liger),
            ("actor_rollout_ref.actor.entropy_checkpointing", arr.actor.entropy_checkpointing),
        ):
            if bool(value):
                problems.append(
                    f"{flag}=true is an option of the fsdp/fsdp2 engines; set it to false for strategy=megatron"
                )


def _check_compile(cfg: DictConfig, problems: list[str]) -> None:
    """``actor.use_torch_compile=true`` compiles the fsdp2 engine's decoder layers; where they cannot be
    compiled (verl.workers.engine.compile.resolve_compile names the same blockers) the run is refused
    before Ray starts. ``null`` is decided by the engine, off where a blocker holds."""
    arr = cfg.actor_rollout_ref
    if arr.actor.use_torch_compile is not True or arr.actor.strategy == "megatron":  # megatron: refused below
        return
    blockers = []
    if arr.actor.strategy != "fsdp2":
        blockers.append(f"{_ACTOR}.strategy={arr.actor.strategy} (compiled decoder layers are wired into fsdp2)")
    if int(arr.actor.ulysses_sequence_parallel_size) > 1:
        blockers.append(f"{_ACTOR}.ulysses_sequence_parallel_size={arr.actor.ulysses_sequence_parallel_size} "
                        "(its all-to-all runs inside the attention)")
    if lora_on(cfg):
        blockers.append("LoRA (actor_rollout_ref.model.lora_rank > 0 or lora_adapter_path; peft's adapter layers "
                        "are not compiled)")
    if blockers:
        problems.append(f"{_ACTOR}.use_torch_compile=true cannot be honoured with " + "; ".join(blockers)
                        + "; set it to false (or null: compiled where it can be)")


def _check_sp(problems, ws: int, key: str, sp: int, strategy: str, model_key: str, model: DictConfig) -> None:
    what = f"{key}.ulysses_sequence_parallel_size={sp}"
    if sp < 1:
        problems.append(f"{what} must be >= 1 (1: no sequence parallelism)")
        return
    if sp == 1:
        return
    if ws % sp:
        problems.append(
            f"{what} must divide the {ws} workers (trainer.nnodes * n_gpus_per_node): each group of {sp} ranks "
            "shares one data-parallel shard"
        )
    if strategy != "fsdp2":
        problems.append(f"{what} is implemented for strategy fsdp2; {key}.strategy is {strategy!r}")
    if not bool(model.use_remove_padding):
        problems.append(f"{what} splits packed sequences; set {model_key}.use_remove_padding=true")


def _has_vision_tower(path: str | None) -> bool | None:
    """Whether a local model folder's config.json has a ``vision_config`` (None for a hub id: unknown here, the
    worker refuses a text model too)."""
    config = Path(str(path)) / "config.json"
    return "vision_config" in json.loads(config.read_text()) if path and config.is_file() else None


def _check_fsdp_size(problems: list[str], ws: int, fsdp_key: str, size: int, key: str, strategy: str) -> None:
    """The engine's hybrid sharding (verl.workers.engine.fsdp): ``fsdp_size`` ranks per shard group."""
    if size <= 0 or size >= ws:
        return  # one shard group of every worker
    if ws % size:
        problems.append(f"{fsdp_key}.fsdp_size={size} must divide the {ws} workers (trainer.nnodes * n_gpus_per_node)")
    elif strategy != "fsdp2":
        problems.append(
            f"{fsdp_key}.fsdp_size={size} < {ws} workers shards in groups (HSDP), which strategy fsdp2 implements; "
            f"{key}.strategy is {strategy!r}: use fsdp2 or fsdp_size=-1"
        )


def _check_liger(cfg: DictConfig, problems: list[str]) -> None:
    device = resolve_device(cfg)
    if device != "cuda":
        problems.append(
            f"actor_rollout_ref.model.use_liger=true needs a CUDA GPU (Liger's kernels are Triton); the device is "
            f"{device}. Set it to false (actor_rollout_ref.model.use_fused_kernels=true gives a chunked LM head "
            "+ log-prob that runs on CPU)"
        )
    elif importlib.util.find_spec("liger_kernel") is None:
        # worded like the engine checks in installed.py ("which is not installed: <line>"): the port tool
        # reports it as an install the command needs, as it does for vllm
        problems.append(
            "actor_rollout_ref.model.use_liger=true needs liger_kernel, which is not installed: "
            "pip install liger-kernel (GPU only; Liger's kernels are Triton)"
        )


def _check_fused_backend(cfg: DictConfig, problems: list[str]) -> None:
    model = cfg.actor_rollout_ref.model
    backend = model.fused_kernel_options.impl_backend
    key = f"actor_rollout_ref.model.fused_kernel_options.impl_backend={backend!r}"
    if backend == "triton":  # (the choices are checked from the field)
        if not bool(model.use_fused_kernels):
            problems.append(f"{key} is the fused kernel's backend; set actor_rollout_ref.model.use_fused_kernels=true")
        elif resolve_device(cfg) != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
            problems.append(
                f"{key} compiles Triton kernels for a CUDA GPU; the device is {resolve_device(cfg)}. Use "
                "impl_backend=torch (the same values), or TRITON_INTERPRET=1 to interpret the kernels on CPU"
            )
        elif importlib.util.find_spec("triton") is None:
            # worded like installed.py: the port tool reports it as an install the command needs
            problems.append(f"{key} needs triton, which is not installed: pip install triton (GPU)")
