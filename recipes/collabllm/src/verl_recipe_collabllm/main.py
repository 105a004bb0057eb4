"""The recipe's entry point, ``verl-collabllm``.

    uv run --package verl-recipe-collabllm verl-collabllm [key=value ...]
        CPU default (configs/collabllm_cpu.yaml): the built-in secret-number task, a tiny Qwen2 warm-started
        on it, the rule-based simulated user served on a local port; GRPO on the multiturn-aware reward.
    uv run --package verl-recipe-collabllm verl-collabllm --config recipes/collabllm/configs/collabllm_qwen2.5_7b_math_hard.yaml [key=value ...]
        The paper's setting on GPUs (set data.*_files, the model path and the simulator's / judge's keys).

The config is core's schema plus ``multi_turn.num_repeat_rollouts`` (`verl_recipe_collabllm.config`).
CollabLLM changes no stage of core's pipeline: generation is the ``collabllm_agent`` loop (the agent worker
runs it), the reward the ``collabllm`` manager, both found by name; the rest is core's recipe runner.

What the CPU default leaves unset is made first: ``data.*_files`` and ``actor_rollout_ref.model.path``
(the built-in task and a warm-started tiny model, `verl_recipe_collabllm.cpu_assets`), and
``multi_turn.interaction_config_path``: an interaction YAML pointing at a `RuleUserServer` started on a
free local port for the length of the run.
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig
from verl.trainer.recipe_runner import BuiltIn, Recipe

from verl_recipe_collabllm import cpu_assets
from verl_recipe_collabllm.config import (
    CollabLLMTrainerConfig,
    load_collabllm_config,
    validate_collabllm_config,
)

CPU_CONFIG = "collabllm_cpu.yaml"
PAPER_CONFIG = "collabllm_qwen2.5_7b_math_hard.yaml"
INTERACTION_KEY = "actor_rollout_ref.rollout.multi_turn.interaction_config_path"


def write_rule_user_interaction(path: Path, base_url: str) -> Path:
    """The interaction YAML of the built-in rule-based user served at ``base_url``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "# written by verl-collabllm: the built-in task's rule-based user, served by RuleUserServer\n"
        "interaction:\n"
        "  - name: collabllm\n"
        "    class_name: verl_recipe_collabllm.interaction.CollabLLMInteraction\n"
        "    config:\n"
        "      user_model: collabllm-rule-user\n"
        f"      api_base: {base_url}\n"
        "      num_retries: 1\n"
        "      max_concurrency: 16\n"
        "      timeout: 30\n"
    )
    return path


def built_in(cfg: DictConfig, built: BuiltIn) -> list[str]:
    """The task data and warm-started model, and (when no interaction is configured) the rule-based user,
    served for the length of the run."""
    extra = cpu_assets.built_in(cfg, built)
    if INTERACTION_KEY in built.unset:
        from verl_recipe_collabllm.sim_server import RuleUserServer

        server = built.stack.enter_context(RuleUserServer())
        path = write_rule_user_interaction(built.root / "rule_user_interaction.yaml", server.base_url)
        extra.append(f"{INTERACTION_KEY}={path}")
        print(f"simulated user: rule-based, serving {server.base_url}/chat/completions", flush=True)
    return extra


RECIPE = Recipe(
    "collabllm", __file__, load=load_collabllm_config, validate=validate_collabllm_config, built_in=built_in,
    made=("data.train_files", "actor_rollout_ref.model.path", INTERACTION_KEY), absolute_paths=(INTERACTION_KEY,),
    plugins=("verl_recipe_collabllm.plugin",),  # the loop, the interaction, the manager, in the driver
    summary=("reward_extra/score/mean", "reward_extra/accuracy/mean", "reward_extra/first_turn_question/mean"),
    schema=CollabLLMTrainerConfig, about=__doc__,
)
