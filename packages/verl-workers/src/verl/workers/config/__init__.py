"""Upstream verl's ``verl.workers.config`` classes: the role and engine sections of the trainer config.

Defined once in verl-core (``verl.trainer.config``, the schema every entry point loads); re-exported here
under upstream's import path. Upstream splits the actor by engine (``FSDPActorConfig``,
``McoreActorConfig``); here one ``ActorConfig`` holds both engine sections, so those names point at it.
"""

from verl.trainer.config import (
    ActorConfig,
    AgentLoopConfig,
    CheckpointConfig,
    CriticConfig,
    FSDPEngineConfig,
    HFModelConfig,
    McoreEngineConfig,
    MultiTurnConfig,
    OptimizerConfig,
    PolicyLossConfig,
    RewardModelConfig,
    RolloutConfig,
    SamplingConfig,
)

FSDPActorConfig = McoreActorConfig = ActorConfig
FSDPCriticConfig = McoreCriticConfig = CriticConfig
FSDPOptimizerConfig = McoreOptimizerConfig = OptimizerConfig

__all__ = [
    "ActorConfig",
    "AgentLoopConfig",
    "CheckpointConfig",
    "CriticConfig",
    "FSDPActorConfig",
    "FSDPCriticConfig",
    "FSDPEngineConfig",
    "FSDPOptimizerConfig",
    "HFModelConfig",
    "McoreActorConfig",
    "McoreCriticConfig",
    "McoreEngineConfig",
    "McoreOptimizerConfig",
    "MultiTurnConfig",
    "OptimizerConfig",
    "PolicyLossConfig",
    "RewardModelConfig",
    "RolloutConfig",
    "SamplingConfig",
]
