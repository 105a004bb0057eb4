"""CollabLLM's config: core's typed schema plus one key, loaded and validated once.

The recipe extends core's dataclasses instead of copying them (``load_config(schema=...)``), so every
core key keeps its type, default and validation and an unknown key is still an error:

- ``actor_rollout_ref.rollout.multi_turn.num_repeat_rollouts`` (upstream's key, default None): the
  future conversations ``collabllm_agent`` samples per trained turn.

The reward options live in core's open dict ``reward.reward_kwargs`` (``metric_weights``,
``llm_judge_kwargs``, upstream's names); `collabllm_problems` checks them with the manager's own check,
and what the loop and the manager need of the rest, before anything starts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from omegaconf import DictConfig, OmegaConf
from verl.trainer.config import (
    ActorRolloutRefConfig,
    MultiTurnConfig,
    PPOTrainerConfig,
    RolloutConfig,
    load_config,
)
from verl.trainer.config.recipes import BUILT_IN
from verl.trainer.recipe_runner import validate_with

from verl_recipe_collabllm.metrics import MetricOptions
from verl_recipe_collabllm.reward_manager import check_reward_kwargs

MT = "actor_rollout_ref.rollout.multi_turn"


@dataclass
class CollabLLMMultiTurnConfig(MultiTurnConfig):
    num_repeat_rollouts: int | None = None


@dataclass
class CollabLLMRolloutConfig(RolloutConfig):
    multi_turn: CollabLLMMultiTurnConfig = field(default_factory=CollabLLMMultiTurnConfig)


@dataclass
class CollabLLMActorRolloutRefConfig(ActorRolloutRefConfig):
    rollout: CollabLLMRolloutConfig = field(default_factory=CollabLLMRolloutConfig)


@dataclass
class CollabLLMTrainerConfig(PPOTrainerConfig):
    """Core's root config with ``rollout.multi_turn.num_repeat_rollouts``."""

    actor_rollout_ref: CollabLLMActorRolloutRefConfig = field(default_factory=CollabLLMActorRolloutRefConfig)


#: Core's loader over the CollabLLM schema (core defaults < ``--config`` files < ``key=value``).
load_collabllm_config = partial(load_config, schema=CollabLLMTrainerConfig)


def collabllm_problems(cfg: DictConfig) -> list[str]:
    """What CollabLLM needs beyond core's checks, each problem in the user's terms."""
    problems: list[str] = []
    rollout = cfg.actor_rollout_ref.rollout
    mt = rollout.multi_turn
    if cfg.reward.reward_manager != "collabllm":
        problems.append(
            f"reward.reward_manager={cfg.reward.reward_manager!r}: CollabLLM's reward is the multiturn-aware "
            "reward of the collabllm manager; set it to collabllm"
        )
    if not mt.enable:
        problems.append(f"{MT}.enable=false: the futures are sampled by an agent loop; set it to true")
    if rollout.agent.default_agent_loop != "collabllm_agent":
        problems.append(
            f"actor_rollout_ref.rollout.agent.default_agent_loop={rollout.agent.default_agent_loop!r}: set it to "
            "collabllm_agent (rows may also name it in agent_name)"
        )
    if mt.num_repeat_rollouts is None or mt.num_repeat_rollouts < 1:
        problems.append(
            f"{MT}.num_repeat_rollouts={mt.num_repeat_rollouts}: futures per trained turn; must be >= 1"
        )
    if mt.max_user_turns is None or mt.max_user_turns < 1:
        problems.append(
            f"{MT}.max_user_turns={mt.max_user_turns}: must be >= 1 (each future has a user turn)"
        )
    if mt.max_assistant_turns is None or mt.max_assistant_turns < 2:
        problems.append(
            f"{MT}.max_assistant_turns={mt.max_assistant_turns}: must be >= 2 (the trained turn and one after it)"
        )
    if not mt.interaction_config_path:
        problems.append(f"{MT}.interaction_config_path is unset: name the simulated user's interaction YAML")
    elif mt.interaction_config_path != BUILT_IN and not Path(mt.interaction_config_path).is_file():
        problems.append(f"{MT}.interaction_config_path={mt.interaction_config_path!r}: no such file")
    kwargs = OmegaConf.to_container(cfg.reward.reward_kwargs, resolve=True)
    options = MetricOptions(
        str(kwargs.get("accuracy_scorer", "llm_judge")),
        str(kwargs.get("completion_extraction", "llm_judge")),
        str(kwargs.get("bleu_unit", "char")),
    )
    problems += check_reward_kwargs(
        kwargs.get("metric_weights"),
        kwargs.get("llm_judge_kwargs"),
        kwargs.get("normalize_by_data_source", False),
        options,
    )
    return problems


#: Core's validation plus `collabllm_problems`, in one `ConfigError`; the config is read-only after.
validate_collabllm_config = validate_with(collabllm_problems)
