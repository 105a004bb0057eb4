"""What the trainer calls on each role's worker group, written down where a reader can find it.

A worker group has no ``def generate_sequences`` of its own: ``WorkerGroup`` binds every
``@register``-ed method of the worker class onto the group when the group is built (dispatch -> run on
each worker -> collect, ``verl.single_controller.base.decorator``). So ``self.actor_rollout_wg.X(...)``
runs ``def X`` of the worker class, on every worker, with the batch split as ``@register`` says. These
protocols name, per role, the methods the trainer's stages call and where they are implemented, so
``grep "def compute_values"`` finds the driver's side and the worker's; verl-workers' tests check that
each name is a registered method of its worker class.

Colocated roles (``create_colocated_worker_cls``) run in one process: the fused class
``FusedWorker_<roles>`` has ``<role>_<method>`` for each role's method and ``spawn`` gives per-role views
that call it by the method's own name, so these names hold there too.
"""

from __future__ import annotations

from typing import Protocol

from verl.protocol import DataProto

__all__ = ["ActorRolloutRefGroup", "CriticGroup", "RewardModelGroup", "TeacherGroup"]


class _Checkpointed(Protocol):
    world_size: int

    def init_model(self) -> None: ...

    def save_checkpoint(self, local_path: str, global_step: int = 0, max_ckpt_to_keep: int | None = None) -> None: ...

    def load_checkpoint(self, local_path: str) -> None: ...


class ActorRolloutRefGroup(_Checkpointed, Protocol):
    """``Role.ActorRollout`` / ``Role.ActorRolloutRef`` (and ``Role.RefPolicy``): verl-workers'
    ``fsdp_workers.ActorRolloutRefWorker`` (``megatron_workers`` for strategy=megatron; verl-agent's
    ``AgentActorRolloutRefWorker`` for multi-turn)."""

    def generate_sequences(self, prompts: DataProto) -> DataProto: ...

    def compute_log_prob(self, data: DataProto) -> DataProto: ...

    def compute_ref_log_prob(self, data: DataProto) -> DataProto: ...

    def update_actor(self, data: DataProto) -> DataProto: ...


class CriticGroup(_Checkpointed, Protocol):
    """``Role.Critic``: verl-workers' ``fsdp_workers.CriticWorker`` (``megatron_workers`` for megatron)."""

    def compute_values(self, data: DataProto) -> DataProto: ...

    def update_critic(self, data: DataProto) -> DataProto: ...


class RewardModelGroup(Protocol):
    """``Role.RewardModel``: verl-rewards' ``models.rm_worker.RewardModelWorker``."""

    world_size: int

    def init_model(self) -> None: ...

    def compute_rm_score(self, data: DataProto) -> DataProto: ...


class TeacherGroup(Protocol):
    """A teacher of on-policy distillation (``TeacherRole(name)``, ``verl.trainer.distillation.teacher_pool``):
    verl-workers' ``teacher_worker.TeacherWorker``."""

    world_size: int

    def init_model(self) -> None: ...

    def compute_teacher_log_probs(self, data: DataProto) -> DataProto: ...
