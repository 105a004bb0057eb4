"""Checks of the ``megatron`` sections (``strategy=megatron``; the schema is ``engine.McoreEngineConfig``).

``actor_rollout_ref.actor.megatron``, ``actor_rollout_ref.ref.megatron`` and ``critic.megatron`` hold
upstream verl's Megatron keys (``McoreEngineConfig``), read by verl-workers' Megatron engine. The
reference's parallel sizes default to the actor's, as upstream. The data-parallel size of a Megatron
role is derived: ``workers / (tensor x pipeline x context parallel)``; per-rank mini-batches divide by it.

Megatron keeps its process groups per process, so the roles that share worker processes (actor and
reference always; the critic when the actor is Megatron too) must use one parallel layout.
"""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig

_ACTOR_MEGATRON = "actor_rollout_ref.actor.megatron"
LAYOUT_KEYS = (
    "tensor_model_parallel_size",
    "pipeline_model_parallel_size",
    "virtual_pipeline_model_parallel_size",
    "context_parallel_size",
    "expert_model_parallel_size",
)
OFFLOAD_KEYS = ("param_offload", "grad_offload", "optimizer_offload")


def model_parallel_size(section: DictConfig) -> int:
    """tensor x pipeline x context parallel: the workers that hold one copy of the data."""
    return (int(section.tensor_model_parallel_size) * int(section.pipeline_model_parallel_size)
            * int(section.context_parallel_size))


def _layout(section: DictConfig) -> dict[str, Any]:
    return {k: section[k] for k in LAYOUT_KEYS}


def check_megatron(cfg: DictConfig, problems: list[str], world: int, use_critic: bool, on_cpu: bool) -> None:
    """Problems of the Megatron roles, before any worker starts (see module doc)."""
    arr = cfg.actor_rollout_ref
    sections = {}
    if arr.actor.strategy == "megatron":
        sections[_ACTOR_MEGATRON] = arr.actor.megatron
        sections["actor_rollout_ref.ref.megatron"] = arr.ref.megatron
    if use_critic and cfg.critic.strategy == "megatron":
        sections["critic.megatron"] = cfg.critic.megatron
    if (arr.actor.strategy == "megatron") != (arr.ref.strategy == "megatron"):
        problems.append(
            f"actor_rollout_ref.actor.strategy={arr.actor.strategy} and ref.strategy={arr.ref.strategy}: the "
            "reference lives in the actor's worker, so both must be megatron or neither"
        )
    for where, sec in sections.items():
        for key in ("tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size",
                    "expert_model_parallel_size"):
            if int(sec[key]) < 1:
                problems.append(f"{where}.{key}={sec[key]} must be >= 1")
                return
        mp = model_parallel_size(sec)
        if world % mp:
            problems.append(
                f"{where}: tensor_model_parallel_size={sec.tensor_model_parallel_size} x "
                f"pipeline_model_parallel_size={sec.pipeline_model_parallel_size} x context_parallel_size="
                f"{sec.context_parallel_size} = {mp} does not divide the {world} workers "
                f"(trainer.nnodes * n_gpus_per_node)"
            )
        if int(sec.context_parallel_size) > 1 or int(sec.expert_model_parallel_size) > 1:
            problems.append(
                f"{where}: context_parallel_size={sec.context_parallel_size} / expert_model_parallel_size="
                f"{sec.expert_model_parallel_size}: context and expert parallelism need Transformer Engine "
                "attention and MoE models, which the megatron engine does not build; set both to 1"
            )
        vpp = sec.virtual_pipeline_model_parallel_size
        if vpp is not None and int(vpp) > 1 and int(sec.pipeline_model_parallel_size) < 2:
            problems.append(f"{where}.virtual_pipeline_model_parallel_size={vpp} needs pipeline_model_parallel_size >= 2")
        on = [k for k in OFFLOAD_KEYS if bool(sec[k])]
        if on and on_cpu:
            problems.append(
                f"{where}.{'/'.join(on)}=true means nothing on CPU (parameters, gradients and optimizer state "
                "already live in host memory); set them to false for trainer.device=cpu"
            )
        elif on:
            problems.append(f"{where}.{'/'.join(on)}=true: offloading is not implemented for strategy=megatron")
    for where, why in (("actor_rollout_ref.ref.megatron", "the reference shares the actor's processes and Megatron's "
                        "process groups are per process; use the actor's sizes"),
                       ("critic.megatron", "the critic is colocated with the actor and Megatron's process groups are "
                        "per process; set critic.megatron.<size> to the actor's")):
        actor = _layout(arr.actor.megatron)
        if _ACTOR_MEGATRON in sections and where in sections and _layout(sections[where]) != actor:
            problems.append(f"{where} {_layout(sections[where])} differs from the actor's {actor}: {why}")
    model_sections = {"actor_rollout_ref.model": arr.model} if _ACTOR_MEGATRON in sections else {}
    if "critic.megatron" in sections:
        model_sections["critic.model"] = cfg.critic.model
    for where, model in model_sections.items():
        if bool(model.use_remove_padding):
            problems.append(
                f"{where}.use_remove_padding=true packs sequences in Megatron's THD layout, which needs "
                "Transformer Engine; strategy=megatron trims each micro-batch to its longest row: set it to false"
            )
    if _ACTOR_MEGATRON in sections and bool(arr.rollout.multi_turn.enable):
        problems.append(
            "actor_rollout_ref.rollout.multi_turn.enable=true runs verl-agent's worker, which extends the FSDP "
            "worker; use actor.strategy=fsdp2 for multi-turn rollouts"
        )
    if cfg.reward.reward_model.enable and cfg.reward.reward_model.strategy == "megatron":
        problems.append("reward.reward_model.strategy=megatron is not supported; set it to fsdp2")


def data_parallel_size(world: int, strategy: str, section: DictConfig) -> int:
    """Workers with distinct data for a role: all of them, or ``world / model_parallel_size`` for Megatron
    (0 when the sizes do not divide the workers: :func:`check_megatron` reports that)."""
    if strategy != "megatron":
        return world
    mp = model_parallel_size(section)
    return world // mp if mp > 0 and world % mp == 0 else 0
