"""The trainer config: typed schema (upstream verl's key and class names), loader, validation, command line.

cfg = load_config(sys.argv[1:])   # schema defaults < --config FILE < key=value overrides (Hydra's grammar)
validate_config(cfg)              # one ConfigError listing every problem; then cfg is read-only
world_size(cfg), resolve_device(cfg), use_critic(cfg)   # derived values, never written back

A recipe extends the schema by subclassing its dataclasses (fields declared with `opt`) and loads with
``load_config(argv, schema=MyTrainerConfig)``. `verl.trainer.config.cli.run_cli` gives an entry point
``--help``, ``--cfg job`` and exit status 2 on a config error.
"""

from verl.trainer.config.derived import (
    resolve_device,
    tokenizer_path,
    trajectories_per_step,
    use_critic,
    use_reference_policy,
    world_size,
)
from verl.trainer.config.engine import (
    CheckpointConfig,
    FSDPEngineConfig,
    McoreEngineConfig,
    MixedPrecisionConfig,
    OptimizerConfig,
)
from verl.trainer.config.fields import ConfigError, opt, ref, schema_fields, section
from verl.trainer.config.loader import DEFAULTS_YAML, config_to_yaml, load_config, schema_defaults
from verl.trainer.config.roles import (
    ActorConfig,
    ActorRolloutRefConfig,
    AgentLoopConfig,
    CriticConfig,
    CriticModelConfig,
    FusedKernelOptionsConfig,
    HFModelConfig,
    MultiTurnConfig,
    PolicyLossConfig,
    RefConfig,
    RewardModelConfig,
    RewardModelModelConfig,
    RolloutConfig,
    SamplingConfig,
)
from verl.trainer.config.schema import (
    AlgoConfig,
    CustomClsConfig,
    CustomRewardFunctionConfig,
    DataConfig,
    FilterGroupsConfig,
    KLControlConfig,
    OverlongBufferConfig,
    PPOTrainerConfig,
    RayKwargsConfig,
    RewardConfig,
    RolloutCorrectionConfig,
    TrainerConfig,
)
from verl.trainer.config.validation import validate_config

__all__ = [
    "DEFAULTS_YAML",
    "ActorConfig",
    "ActorRolloutRefConfig",
    "AgentLoopConfig",
    "AlgoConfig",
    "CheckpointConfig",
    "ConfigError",
    "CriticConfig",
    "CriticModelConfig",
    "CustomClsConfig",
    "CustomRewardFunctionConfig",
    "DataConfig",
    "FSDPEngineConfig",
    "FilterGroupsConfig",
    "FusedKernelOptionsConfig",
    "HFModelConfig",
    "KLControlConfig",
    "McoreEngineConfig",
    "MixedPrecisionConfig",
    "MultiTurnConfig",
    "OptimizerConfig",
    "OverlongBufferConfig",
    "PPOTrainerConfig",
    "PolicyLossConfig",
    "RayKwargsConfig",
    "RefConfig",
    "RewardConfig",
    "RewardModelConfig",
    "RewardModelModelConfig",
    "RolloutConfig",
    "RolloutCorrectionConfig",
    "SamplingConfig",
    "TrainerConfig",
    "config_to_yaml",
    "load_config",
    "opt",
    "ref",
    "resolve_device",
    "schema_defaults",
    "schema_fields",
    "section",
    "tokenizer_path",
    "trajectories_per_step",
    "use_critic",
    "use_reference_policy",
    "validate_config",
    "world_size",
]
