"""The recipe's entry point, ``verl-collabllm``.

    uv run --package verl-recipe-collabllm verl-collabllm [key=value ...]
        CPU default (configs/collabllm_cpu.yaml): the built-in secret-number task, a tiny Qwen2 warm-started
        on it, the rule-based simulated user served on a local port; GRPO on the multiturn-aware reward.
    uv run --package verl-recipe-collabllm verl-collabllm --config recipes/collabllm/configs/collabllm_qwen2.5_7b_math_hard.yaml [key=value ...]
        The paper's setting on GPUs (set data.*_files, the model path and the simulator's / judge's keys).

Config order (later wins): core's defaults < ``--config`` files (the CPU default when none is given) <
``key=value`` overrides, over core's schema plus ``multi_turn.num_repeat_rollouts``
(`verl_recipe_collabllm.config`). CollabLLM changes no stage of core's loop: generation is the
``collabllm_agent`` loop (the agent worker runs it), the reward the ``collabllm`` manager, both found by
name, so training is core's ``run_ppo`` as it is.

What the CPU default leaves unset is filled in before validation: ``data.train_files`` /
``data.val_files`` and ``actor_rollout_ref.model.path`` with the built-in task and a warm-started tiny
model (`verl_recipe_collabllm.cpu_assets`), and ``multi_turn.interaction_config_path`` with an
interaction YAML pointing at a `RuleUserServer` this process starts on a free local port (stopped at
the end).
"""

from __future__ import annotations

import os
import sys
from contextlib import ExitStack
from pathlib import Path

from omegaconf import DictConfig, OmegaConf
from verl.trainer.config.recipes import load_with_built_in, recipe_configs_dir
from verl.trainer.config.recipes import with_default_config as _with_default_config

CPU_CONFIG = "collabllm_cpu.yaml"
PAPER_CONFIG = "collabllm_qwen2.5_7b_math_hard.yaml"
INTERACTION_KEY = "actor_rollout_ref.rollout.multi_turn.interaction_config_path"


def configs_dir() -> Path:
    """The recipe's configs: inside the package in a wheel, ``recipes/collabllm/configs`` in the repo."""
    return recipe_configs_dir(__file__)


def with_default_config(argv: list[str]) -> list[str]:
    """Prepend ``--config <CPU default>`` unless the command line names a config file."""
    return _with_default_config(argv, configs_dir() / CPU_CONFIG)


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


def load_recipe_config(argv: list[str], stack: ExitStack) -> DictConfig:
    """Load (CPU default when no ``--config``); fill what the config leaves unset (task data, tiny model,
    a rule-based user started on ``stack``); validate. The result is read-only."""
    from verl_recipe_collabllm.config import load_collabllm_config, validate_collabllm_config
    from verl_recipe_collabllm.cpu_assets import asset_overrides

    def overrides(cfg: DictConfig, unset: list[str]) -> list[str]:
        extra = asset_overrides(cfg)
        interaction = OmegaConf.select(cfg, INTERACTION_KEY)
        if interaction and not Path(interaction).is_absolute() and Path(interaction).is_file():
            # Ray workers load the file in their own processes, possibly elsewhere: pass it by absolute path.
            extra.append(f"{INTERACTION_KEY}={Path(interaction).resolve()}")
        if INTERACTION_KEY in unset:
            from verl_recipe_collabllm.sim_server import RuleUserServer

            server = stack.enter_context(RuleUserServer())
            path = Path(cfg.trainer.default_local_dir).resolve() / "assets" / "rule_user_interaction.yaml"
            extra.append(f"{INTERACTION_KEY}={write_rule_user_interaction(path, server.base_url)}")
            print(f"simulated user: rule-based, serving {server.base_url}/chat/completions", flush=True)
        return extra

    made = ("data.train_files", "actor_rollout_ref.model.path", INTERACTION_KEY)
    return load_with_built_in(
        with_default_config(argv), load_collabllm_config, validate_collabllm_config, made, overrides
    )


def run_collabllm(cfg: DictConfig) -> dict[str, float]:
    """Train with a validated config through core's ``main_ppo.run_ppo`` (Ray, datasets, the collabllm
    reward manager, the agent worker, tracker). Returns the last step's metrics."""
    from verl.trainer.main_ppo import run_ppo

    import verl_recipe_collabllm.plugin  # noqa: F401  (the loop, the interaction, the manager, in this process)

    return run_ppo(cfg)


def train(argv: list[str]) -> dict[str, float]:
    """Load the config from ``argv`` and train (a built-in user server lives as long as the run)."""
    with ExitStack() as stack:
        return run_collabllm(load_recipe_config(argv, stack))


def main(argv: list[str] | None = None) -> None:
    """The ``verl-collabllm`` command: ``--help``, ``--cfg job`` (the CPU default's resolved config), training;
    a config error prints its problems and exits with status 2."""
    from verl.trainer.config.cli import run_cli

    from verl_recipe_collabllm.config import CollabLLMTrainerConfig, load_collabllm_config

    run_cli(argv, prog="verl-collabllm", schema=CollabLLMTrainerConfig, main=_main, load=lambda a: load_collabllm_config(with_default_config(a)), about=__doc__)


def _main(argv: list[str] | None = None) -> None:
    """The ``verl-collabllm`` console script (returns None: a returned value would become the exit status)."""
    # Under `uv run`, Ray would rebuild the environment for its workers; they share the driver's.
    # Ray reads this when first imported, hence before anything imports it.
    os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
    metrics = train(list(sys.argv[1:] if argv is None else argv))
    keys = ("reward_extra/score/mean", "reward_extra/accuracy/mean", "reward_extra/first_turn_question/mean")
    shown = {k.split("/")[1]: round(metrics[k], 4) for k in keys if k in metrics}
    print(f"CollabLLM finished at step {metrics.get('training/global_step')}: {shown}", flush=True)


if __name__ == "__main__":
    main()
