"""Checks of the LoRA keys ``actor_rollout_ref.model.{lora_rank, lora_alpha, target_modules, exclude_modules,
lora_adapter_path}`` (read by verl-workers' ``verl.workers.engine.lora``; peft is not needed here)."""

from __future__ import annotations

import json
import os

from omegaconf import DictConfig, ListConfig

_KEY = "actor_rollout_ref.model"


def lora_on(cfg: DictConfig) -> bool:
    m = cfg.actor_rollout_ref.model
    return int(m.lora_rank or 0) > 0 or m.lora_adapter_path is not None


def _names(value) -> bool:
    if isinstance(value, str):
        return bool(value)
    return (
        isinstance(value, list | ListConfig) and bool(value) and all(isinstance(v, str) and v for v in value)
    )


def check_layered_summon(cfg: DictConfig, problems: list[str]) -> None:
    """``rollout.layered_summon`` (upstream's LoRA option): gather the weights for the rollout layer by layer."""
    arr = cfg.actor_rollout_ref
    if not arr.rollout.layered_summon:
        return
    key = "actor_rollout_ref.rollout.layered_summon=true"
    if arr.actor.strategy != "fsdp2":
        problems.append(
            f"{key} is implemented for the fsdp2 engine (FSDP1's state-dict hooks unshard the whole model; the "
            f"megatron engine gathers per pipeline stage); actor_rollout_ref.actor.strategy is {arr.actor.strategy!r}"
        )
    elif arr.rollout.lora_sync == "adapter":
        problems.append(
            f"{key} gathers merged weights layer by layer; with rollout.lora_sync=adapter only the adapter is "
            "sent to vLLM (the base weights once, whole): set lora_sync=merged or layered_summon=false"
        )
    elif not lora_on(cfg) and arr.rollout.name in ("native", "hf"):
        problems.append(
            f"{key}: nothing is gathered here, the {arr.rollout.name} rollout reads the actor's module directly; "
            "it applies to LoRA runs (merged weights) and to rollout engines with their own weights (vllm, sglang)"
        )


#: vLLM's allowed ``max_lora_rank`` values (vllm.config.lora.MaxLoRARanks); the adapter's rank rounds up
VLLM_MAX_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


def _check_lora_sync(cfg: DictConfig, problems: list[str]) -> None:
    rollout = cfg.actor_rollout_ref.rollout
    sync = rollout.lora_sync
    if sync == "adapter":
        if not lora_on(cfg):
            problems.append(
                "actor_rollout_ref.rollout.lora_sync=adapter sends LoRA adapters to the rollout, but LoRA is off "
                f"({_KEY}.lora_rank=0, no lora_adapter_path): set lora_rank > 0 or lora_sync=merged"
            )
        if rollout.name != "vllm":
            problems.append(
                f"actor_rollout_ref.rollout.lora_sync=adapter needs vLLM's LoRA path (rollout.name=vllm); "
                f"rollout.name={rollout.name!r} takes merged weights: set lora_sync=merged"
            )
        if int(cfg.actor_rollout_ref.model.lora_rank or 0) > VLLM_MAX_LORA_RANKS[-1]:
            problems.append(
                f"{_KEY}.lora_rank={cfg.actor_rollout_ref.model.lora_rank}: vLLM's LoRA path takes ranks up to "
                f"{VLLM_MAX_LORA_RANKS[-1]}; use rollout.lora_sync=merged"
            )


def check_lora(cfg: DictConfig, problems: list[str]) -> None:
    check_layered_summon(cfg, problems)
    m = cfg.actor_rollout_ref.model
    if not isinstance(m.lora_rank, int) or m.lora_rank < 0:
        problems.append(f"{_KEY}.lora_rank={m.lora_rank!r} must be an integer >= 0 (0 turns LoRA off)")
        return
    _check_lora_sync(cfg, problems)
    if not lora_on(cfg):
        return
    if m.lora_alpha is None or m.lora_alpha <= 0:
        problems.append(
            f"{_KEY}.lora_alpha={m.lora_alpha!r} must be > 0 (the adapter's scale is lora_alpha / lora_rank)"
        )
    if not _names(m.target_modules):
        problems.append(
            f"{_KEY}.target_modules={m.target_modules!r} must be 'all-linear' or a non-empty list of module names"
        )
    if m.exclude_modules is not None and not _names(m.exclude_modules):
        problems.append(
            f"{_KEY}.exclude_modules={m.exclude_modules!r} must be null, a regex string or a list of module names"
        )
    path = m.lora_adapter_path
    if path is not None:
        config_file = os.path.join(str(path), "adapter_config.json")
        if not os.path.isfile(config_file):
            problems.append(
                f"{_KEY}.lora_adapter_path={path!r} has no adapter_config.json (a peft adapter folder)"
            )
        else:
            with open(config_file) as f:
                r = json.load(f).get("r")
            if m.lora_rank and r != m.lora_rank:
                problems.append(
                    f"{_KEY}.lora_rank={m.lora_rank} but the adapter at lora_adapter_path={path!r} has r={r}; the "
                    f"adapter's config wins: set lora_rank=0 or {r}"
                )
    for section in ("actor", "ref"):
        strategy = cfg.actor_rollout_ref[section].strategy
        if strategy == "megatron":
            problems.append(
                f"LoRA ({_KEY}.lora_rank={m.lora_rank}) runs on the FSDP engines; actor_rollout_ref.{section}."
                f"strategy=megatron does not support it: use fsdp2 or lora_rank=0"
            )
