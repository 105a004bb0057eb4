"""Backend-neutral single-controller pieces: workers, worker groups, dispatch modes."""

from verl.single_controller.base.worker import Worker
from verl.single_controller.base.worker_group import ClassWithInitArgs, ResourcePool, WorkerGroup

__all__ = ["Worker", "WorkerGroup", "ClassWithInitArgs", "ResourcePool"]
