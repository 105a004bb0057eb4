"""ReTool's config: core's typed schema plus a ``retool`` section, loaded and validated once.

``retool`` (the CPU default's knobs; every key is read by `verl_recipe_retool.main`):

- ``use_tool`` (true): rollouts run with the ``code_interpreter`` tool. false is the A/B's no-tool arm:
  no tool in rollouts and, when the recipe builds the model, a cold start on direct answers.
- ``cold_start_steps`` (400): SFT steps of the built-in tiny model's cold start (used when
  ``actor_rollout_ref.model.path`` is null; a real model comes already cold-started, as upstream's
  SFT checkpoint does).
- ``task_digits`` (2), ``task_train_size`` (256), ``task_test_size`` (64): the built-in task
  (``digits``-digit products), used when ``data.train_files`` is null.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import DictConfig
from verl.trainer.config import PPOTrainerConfig, load_config
from verl.trainer.config.recipes import BUILT_IN
from verl.trainer.recipe_runner import validate_with

MT = "actor_rollout_ref.rollout.multi_turn"


@dataclass
class ReToolConfig:
    use_tool: bool = True
    cold_start_steps: int = 400
    task_digits: int = 2
    task_train_size: int = 256
    task_test_size: int = 64


@dataclass
class ReToolTrainerConfig(PPOTrainerConfig):
    """Core's root config with the ``retool`` section."""

    retool: ReToolConfig = field(default_factory=ReToolConfig)


def load_retool_config(argv: list[str]) -> DictConfig:
    """Core's loader over the ReTool schema (core defaults < ``--config`` files < ``key=value``)."""
    return load_config(argv, schema=ReToolTrainerConfig)


def retool_problems(cfg: DictConfig) -> list[str]:
    """What ReTool needs beyond core's checks, in the user's terms."""
    problems: list[str] = []
    rt = cfg.retool
    rollout = cfg.actor_rollout_ref.rollout
    mt = rollout.multi_turn
    if not mt.enable:
        problems.append(
            f"{MT}.enable=false: ReTool's rollouts are multi-turn (code, output, ...); set it to true"
        )
    if rollout.agent.default_agent_loop != "tool_agent":
        problems.append(
            f"actor_rollout_ref.rollout.agent.default_agent_loop={rollout.agent.default_agent_loop!r}: "
            "ReTool rolls out with verl-agent's tool_agent; set it to tool_agent"
        )
    if rt.use_tool:
        if mt.max_assistant_turns is None or mt.max_assistant_turns < 2:
            problems.append(
                f"{MT}.max_assistant_turns={mt.max_assistant_turns}: with the tool a trajectory needs at least "
                "2 assistant turns (code, then the answer); it also caps the tool calls per trajectory"
            )
        path = mt.tool_config_path
        if path and path != BUILT_IN and not Path(path).is_file():
            problems.append(f"{MT}.tool_config_path={path!r}: no such file")
    elif mt.tool_config_path:
        problems.append(
            f"retool.use_tool=false (the no-tool arm) but {MT}.tool_config_path={mt.tool_config_path!r}; "
            "unset the tool config or set retool.use_tool=true"
        )
    if rt.cold_start_steps < 0:
        problems.append(f"retool.cold_start_steps={rt.cold_start_steps}: must be >= 0")
    if not 1 <= rt.task_digits <= 6:
        problems.append(f"retool.task_digits={rt.task_digits}: must be in 1..6")
    if rt.task_train_size < 1 or rt.task_test_size < 1:
        problems.append(
            f"retool.task_train_size={rt.task_train_size}, task_test_size={rt.task_test_size}: both must be >= 1"
        )
    return problems


#: Core's validation plus `retool_problems`, in one `ConfigError`.
validate_retool_config = validate_with(retool_problems)
