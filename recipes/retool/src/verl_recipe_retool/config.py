"""ReTool's config: core's typed schema plus a ``retool`` section, loaded and validated once.

``retool`` (every key is read by `verl_recipe_retool.main` / `retool_overrides`):

- ``reward`` (``upstream``): which reward scores the rollouts.
  ``upstream``: upstream's ReTool reward (`verl_recipe_retool.reward`: the strict last-``\\boxed{}`` check,
  +1 / -1, with a bonus for tool turns on wrong answers capped at -0.6) for every data source; the recipe
  sets ``reward.custom_reward_function`` to it.
  ``final_answer``: the data source's own scorer, the final answer's correctness only (the paper's
  description; ``retool_arith``: the strict box check, 1 / 0; ``math_dapo`` / ``aime*``: DAPO's
  ``Answer:`` check).
- ``answer_format`` (true): upstream's dataset step (`verl_recipe_retool.dataset`): the answer-format
  instruction (``\\boxed{}``) appended to every prompt, raw AIME files mapped to rows; the recipe sets
  ``data.custom_cls`` to it. false: the rows' prompts as they are.
- ``use_tool`` (true): rollouts run with the ``code_interpreter`` tool. false is the A/B's no-tool arm:
  no tool in rollouts and, when the recipe builds the model, a cold start on direct answers.
- ``cold_start_steps`` (400): SFT steps of the built-in tiny model's cold start (used when
  ``actor_rollout_ref.model.path`` is null; a real model comes already cold-started, as upstream's
  SFT checkpoint does).
- ``cold_start_data`` (null): a local file in the ReTool-SFT format; the cold start trains on its
  conversations, converted as upstream's preprocessing does (`verl_recipe_retool.sft_data`), instead of
  traces generated on the built-in task.
- ``task_digits`` (2), ``task_train_size`` (256), ``task_test_size`` (64): the built-in task
  (``digits``-digit products), used when ``data.train_files`` is null.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from omegaconf import DictConfig
from verl.trainer.config import PPOTrainerConfig, load_config
from verl.trainer.config.recipes import BUILT_IN
from verl.trainer.recipe_runner import validate_with

MT = "actor_rollout_ref.rollout.multi_turn"
REWARDS = ("upstream", "final_answer")
REWARD_KEY = "reward.custom_reward_function"
DATASET_KEY = "data.custom_cls"


@dataclass
class ReToolConfig:
    reward: str = "upstream"
    answer_format: bool = True
    use_tool: bool = True
    cold_start_steps: int = 400
    cold_start_data: str | None = None
    task_digits: int = 2
    task_train_size: int = 256
    task_test_size: int = 64


@dataclass
class ReToolTrainerConfig(PPOTrainerConfig):
    """Core's root config with the ``retool`` section."""

    retool: ReToolConfig = field(default_factory=ReToolConfig)


#: Core's loader over the ReTool schema (core defaults < ``--config`` files < ``key=value``).
load_retool_config = partial(load_config, schema=ReToolTrainerConfig)


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
    if rt.reward not in REWARDS:
        problems.append(f"retool.reward={rt.reward!r}: must be one of {', '.join(REWARDS)}")
    ours = recipe_files()
    reward_path = cfg.reward.custom_reward_function.path
    if rt.reward == "upstream" and reward_path not in (None, ours["reward"]):
        problems.append(
            f"retool.reward=upstream scores with the recipe's reward, but {REWARD_KEY}.path={reward_path!r} is "
            "set; unset it, or set retool.reward=final_answer to score with your function"
        )
    custom_path = cfg.data.custom_cls.path
    if rt.answer_format and custom_path not in (None, ours["dataset"]):
        problems.append(
            f"retool.answer_format=true reads the data with the recipe's ReToolDataset, but {DATASET_KEY}.path="
            f"{custom_path!r} is set; unset it, or set retool.answer_format=false to use your dataset class"
        )
    if rt.cold_start_data is not None:
        if not rt.use_tool:
            problems.append(
                "retool.cold_start_data is ReTool-SFT data (tool-using traces) but retool.use_tool=false; "
                "unset one of them"
            )
        if rt.cold_start_data != BUILT_IN and not Path(rt.cold_start_data).is_file():
            problems.append(f"retool.cold_start_data={rt.cold_start_data!r}: no such file")
    if cfg.actor_rollout_ref.model.path in (None, BUILT_IN) and mt.format != "hermes":
        problems.append(
            f"{MT}.format={mt.format!r}: the built-in cold start writes Hermes tool calls; set it to hermes, or "
            "give a model cold-started in that format (actor_rollout_ref.model.path)"
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


def recipe_files() -> dict[str, str]:
    """The recipe's own reward and dataset files (what `retool_overrides` points core's keys at)."""
    here = Path(__file__).resolve().parent
    return {"reward": str(here / "reward.py"), "dataset": str(here / "dataset.py")}


def retool_overrides(cfg: DictConfig) -> list[str]:
    """``key=value`` overrides that wire ``retool.reward`` and ``retool.answer_format`` into core's keys."""
    ours = recipe_files()
    out = []
    if cfg.retool.reward == "upstream" and not cfg.reward.custom_reward_function.path:
        out += [f"{REWARD_KEY}.path={ours['reward']}", f"{REWARD_KEY}.name=compute_score"]
    if cfg.retool.answer_format and not cfg.data.custom_cls.path:
        out += [f"{DATASET_KEY}.path={ours['dataset']}", f"{DATASET_KEY}.name=ReToolDataset"]
    return out


#: Core's validation plus `retool_problems`, in one `ConfigError`.
validate_retool_config = validate_with(retool_problems)
