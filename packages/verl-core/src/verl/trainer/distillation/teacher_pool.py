"""The teachers' place in the trainer: their roles, resource pools, constructor keywords and start.

Each teacher (``distillation.teacher_models.<name>``) is the role ``TeacherRole(name)`` (``str``:
``teacher_<name>``), played by the worker class ``WORKER_CLASSES["teacher"]`` (verl-workers'
``TeacherWorker``) on a resource pool of its own, ``teacher_pool_<name>``, of ``world_size`` workers: the
teachers together fill ``distillation.nnodes x n_gpus_per_node``. ``verl.trainer.ppo.run`` adds the roles and pools;
``RayPPOTrainer.init_workers`` adds the constructor keywords and starts them (`start_teachers`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf

from verl.trainer.config.distillation import distillation_enabled, resolve_teachers

#: the routing key of a single teacher: it scores every row
SINGLE = "default"


@dataclass(frozen=True)
class TeacherRole:
    """The role of one teacher, by its ``teacher_models`` entry name."""

    name: str

    def __str__(self) -> str:
        return f"teacher_{self.name}"


def teacher_roles(config: DictConfig) -> dict[TeacherRole, Any]:
    """``{TeacherRole: worker class}`` for the role mapping of ``verl.trainer.ppo.run`` (empty without distillation)."""
    if not distillation_enabled(config):
        return {}
    from verl.registries import WORKER_CLASSES

    return {TeacherRole(name): WORKER_CLASSES.get("teacher") for name in resolve_teachers(config)}


def teacher_resource_pools(config: DictConfig) -> tuple[dict[str, list[int]], dict[TeacherRole, str]]:
    """The teachers' pools (``{name: workers per node}``) and ``{TeacherRole: pool name}``: a teacher of
    W workers takes ``[W]`` on one node when W <= n_gpus_per_node, else whole nodes."""
    if not distillation_enabled(config):
        return {}, {}
    per_node = int(config.distillation.n_gpus_per_node)
    spec, mapping = {}, {}
    for name, t in resolve_teachers(config).items():
        world = int(t.world_size)
        pool = f"teacher_pool_{name}"
        spec[pool] = [world] if world <= per_node else [per_node] * (world // per_node)
        mapping[TeacherRole(name)] = pool
    return spec, mapping


def actor_distillation_kwargs(config: DictConfig) -> dict[str, Any]:
    """The actor worker's keyword for the distillation term of its loss (none without distillation)."""
    if not distillation_enabled(config):
        return {}
    return {"distillation_loss": config.distillation.distillation_loss}


def _model_section(config: DictConfig, teacher: DictConfig) -> DictConfig:
    """The student's model section with the teacher's path and dtype, none of the student's own
    training options (LoRA, checkpointing, the fused head, HF config overrides) and no chat template."""
    model = OmegaConf.to_container(config.actor_rollout_ref.model, resolve=True)
    model.update(
        path=str(teacher.model_path), tokenizer_path=None, custom_chat_template=None, override_config={},
        lora_rank=0, lora_adapter_path=None, enable_gradient_checkpointing=False, enable_activation_offload=False,
        use_fused_kernels=False, model_dtype=str(teacher.inference.dtype),
    )
    return OmegaConf.create(model)


def _engine_section(config: DictConfig, teacher: DictConfig) -> DictConfig:
    """The reference policy's ``fsdp_config`` (an inference-only engine) computing in the teacher's dtype."""
    engine = OmegaConf.to_container(config.actor_rollout_ref.ref.fsdp_config, resolve=True)
    engine["model_dtype"] = str(teacher.inference.dtype)
    engine["mixed_precision"]["param_dtype"] = str(teacher.inference.dtype)
    return OmegaConf.create(engine)


def teacher_init_kwargs(config: DictConfig, env: dict[str, Any], mapping: dict, topk: int) -> dict[TeacherRole, dict[str, Any]]:
    """Each teacher role's constructor keywords (``env``: device and seed, as every worker gets; ``topk``:
    log-probs per token, ``verl.trainer.ppo.distillation_losses.teacher_topk``)."""
    if not distillation_enabled(config):
        return {}
    out = {}
    for name, t in resolve_teachers(config).items():
        role = TeacherRole(name)
        if role not in mapping:
            raise ValueError(
                f"distillation.enabled=true but role_worker_mapping has no {role} (teacher {name!r}); "
                "verl.trainer.ppo.run.build_role_worker_mapping adds it (verl.trainer.distillation.teacher_pool.teacher_roles)"
            )
        out[role] = dict(config=t, model=_model_section(config, t), engine_config=_engine_section(config, t),
                         strategy=str(config.actor_rollout_ref.ref.strategy), topk=topk, **env)
    return out


def start_teachers(all_wg: dict[str, Any], config: DictConfig) -> dict[str, Any]:
    """Load every teacher (``init_model``); returns ``{routing key: worker group}`` (one teacher: `SINGLE`)."""
    if not distillation_enabled(config):
        return {}
    teachers = resolve_teachers(config)
    out = {}
    for name, t in teachers.items():
        wg = all_wg[str(TeacherRole(name))]
        wg.init_model()
        out[SINGLE if len(teachers) == 1 else str(t.key)] = wg
    return out
