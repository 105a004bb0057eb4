"""Every method core's trainer calls on a role's worker group (``verl.trainer.ppo.worker_groups``) is a
``@register``-ed method of the worker class that plays the role, so the group binds it."""

import inspect

import pytest
from verl.single_controller.base.decorator import registered_methods
from verl.trainer.ppo import worker_groups as wg
from verl.workers import fsdp_workers, teacher_worker


def _protocol_methods(protocol) -> set[str]:
    return {
        name
        for cls in protocol.__mro__
        if cls.__module__ == wg.__name__
        for name, member in vars(cls).items()
        if inspect.isfunction(member) and not name.startswith("_")
    }


@pytest.mark.parametrize(
    ("protocol", "worker"),
    [(wg.ActorRolloutRefGroup, fsdp_workers.ActorRolloutRefWorker), (wg.CriticGroup, fsdp_workers.CriticWorker)],
)
def test_the_trainers_calls_are_registered_worker_methods(protocol, worker):
    wanted = _protocol_methods(protocol)
    assert {"init_model", "save_checkpoint", "load_checkpoint"} <= wanted  # the shared part is included
    missing = wanted - set(registered_methods(worker))
    assert not missing, f"{worker.__name__} does not register {sorted(missing)}"


def test_the_reward_model_worker_registers_what_the_trainer_calls():
    rm_worker = pytest.importorskip("verl.rewards.models.rm_worker")  # verl-rewards, not a dependency

    RewardModelWorker = rm_worker.RewardModelWorker
    assert _protocol_methods(wg.RewardModelGroup) <= set(registered_methods(RewardModelWorker))


def test_the_teacher_worker_registers_what_the_trainer_calls():
    wanted = _protocol_methods(wg.TeacherGroup)
    assert wanted == {"init_model", "compute_teacher_log_probs"}
    assert wanted <= set(registered_methods(teacher_worker.TeacherWorker))
