"""The trainer's model roles and the two small helpers its stages use on worker results."""

from __future__ import annotations

import contextlib
from enum import Enum

from verl.protocol import DataProto
from verl.single_controller.base.errors import WorkerError

__all__ = ["Role", "merge_outputs", "naming_step"]


class Role(Enum):
    """A model role; ``str(role)`` is the name the worker class receives as ``role=``."""

    Actor = 0
    Rollout = 1
    ActorRollout = 2
    Critic = 3
    RefPolicy = 4
    RewardModel = 5
    ActorRolloutRef = 6

    def __str__(self) -> str:
        return _ROLE_NAMES[self]


_ROLE_NAMES = {
    Role.Actor: "actor",
    Role.Rollout: "rollout",
    Role.ActorRollout: "actor_rollout",
    Role.Critic: "critic",
    Role.RefPolicy: "ref",
    Role.RewardModel: "reward_model",
    Role.ActorRolloutRef: "actor_rollout_ref",
}


def merge_outputs(batch: DataProto, output: DataProto) -> tuple[DataProto, dict]:
    """Add a worker call's tensors and non-tensors to ``batch``; return it and the call's metrics.

    The output's meta_info is not merged (workers echo and extend it); only its ``metrics`` matter.
    """
    metrics = output.meta_info.get("metrics", {})
    batch.union(DataProto(batch=output.batch, non_tensor_batch=output.non_tensor_batch, meta_info={}))
    return batch, metrics


@contextlib.contextmanager
def naming_step(step: int):
    """A worker's failure (a raise, or its process killed) re-raised with the training step it hit: the
    message already names the role, rank and pid; the step says what the last checkpoint lost."""
    try:
        yield
    except WorkerError as e:
        raise type(e)(f"training step {step}: {e}", e.rank, e.method) from e
