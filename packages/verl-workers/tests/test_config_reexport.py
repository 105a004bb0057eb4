"""``verl.workers.config`` is upstream's import path for the role and engine config classes: the same
classes verl-core's schema uses (one definition), so a recipe subclassing either extends the same schema."""

import dataclasses

import verl.trainer.config as core
import verl.workers.config as workers


def test_upstream_names_are_cores_classes():
    assert workers.ActorConfig is core.ActorConfig is workers.FSDPActorConfig
    assert workers.RolloutConfig is core.RolloutConfig and workers.CriticConfig is core.CriticConfig
    assert workers.FSDPEngineConfig is core.FSDPEngineConfig and workers.OptimizerConfig is core.OptimizerConfig
    rollout_fields = {f.name for f in dataclasses.fields(workers.RolloutConfig)}
    assert {"name", "n", "tensor_model_parallel_size", "val_kwargs"} <= rollout_fields
    assert core.schema_fields(core.PPOTrainerConfig)["actor_rollout_ref.rollout.n"].default == 5
