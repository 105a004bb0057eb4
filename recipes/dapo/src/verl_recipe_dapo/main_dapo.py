"""The recipe's entry point, ``verl-dapo``.

    uv run --package verl-recipe-dapo verl-dapo [key=value ...]
        CPU default (configs/dapo_cpu.yaml): builds a tiny Qwen2, warm-starts it with SFT on the
        built-in arithmetic task, then trains it with DAPO; metrics, reward curve in trainer.default_local_dir.
    uv run --package verl-recipe-dapo verl-dapo --config recipes/dapo/configs/dapo_qwen2.5_32b.yaml [key=value ...]
        The paper's setting on GPUs (set data.train_files, data.val_files, actor_rollout_ref.model.path).

Config order (later wins): core's defaults < ``--config`` files (the CPU default when none is given) <
``key=value`` overrides. Keys and validation are core's (``verl.trainer.config``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from omegaconf import DictConfig
from verl.trainer.config import load_config, validate_config
from verl.trainer.config.recipes import load_with_built_in, recipe_configs_dir
from verl.trainer.config.recipes import with_default_config as _with_default_config

CPU_CONFIG = "dapo_cpu.yaml"
PAPER_CONFIG = "dapo_qwen2.5_32b.yaml"


def configs_dir() -> Path:
    """The recipe's configs: inside the package in a wheel, ``recipes/dapo/configs`` in the repo."""
    return recipe_configs_dir(__file__)


def with_default_config(argv: list[str]) -> list[str]:
    """Prepend ``--config <CPU default>`` unless the command line names a config file."""
    return _with_default_config(argv, configs_dir() / CPU_CONFIG)


def build_reward_fn(cfg: DictConfig, tokenizer: Any, num_examine: int) -> Any:
    """Core's reward-manager loader: with `reward.overlong_buffer.enable` it passes the buffer and
    `max_resp_len = data.max_response_length` to the `dapo` manager."""
    from verl.trainer.ppo.reward import load_reward_manager

    return load_reward_manager(cfg, tokenizer, num_examine)


def run_dapo(cfg: DictConfig) -> dict[str, float]:
    """Train with a validated config through core's ``main_ppo.run_ppo`` (Ray start, datasets, registry
    workers, pools, config.yaml, output summary; dynamic sampling is core's filter stage) with the DAPO
    reward managers. Returns the last step's metrics."""
    from verl.trainer.main_ppo import load_tokenizer, run_ppo

    tokenizer = load_tokenizer(cfg)
    return run_ppo(
        cfg,
        tokenizer=tokenizer,
        reward_fn=build_reward_fn(cfg, tokenizer, int(cfg.reward.num_examine)),
        val_reward_fn=build_reward_fn(cfg, tokenizer, 1) if cfg.data.val_files else None,
    )


def load_dapo_config(argv: list[str]) -> DictConfig:
    """Load (CPU default when no ``--config``), prepare the CPU assets when the config leaves the model or
    data unset, validate; the result is read-only."""
    from verl_recipe_dapo.cpu_assets import asset_overrides

    return load_with_built_in(
        with_default_config(argv),
        load_config,
        validate_config,
        made=("data.train_files", "actor_rollout_ref.model.path"),
        overrides=lambda cfg, _unset: asset_overrides(cfg),
    )


def train(argv: list[str]) -> dict[str, float]:
    """Load the config from ``argv`` and train; returns the last step's metrics."""
    return run_dapo(load_dapo_config(argv))


def main(argv: list[str] | None = None) -> None:
    """The ``verl-dapo`` console script (returns None: a returned value would become the exit status)."""
    # Under `uv run`, Ray would rebuild the environment for its workers; they share the driver's.
    # Ray reads this when first imported, hence before anything imports it.
    os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
    cfg = load_dapo_config(list(sys.argv[1:] if argv is None else argv))
    metrics = run_dapo(cfg)  # core prints where the config, metrics and plot went
    key = f"dynamic_sampling/all_{cfg.algorithm.filter_groups.metric}/mean"
    if key in metrics:
        print(
            f"DAPO finished at step {metrics['training/global_step']}: {key} = {metrics[key]:.4f}", flush=True
        )


if __name__ == "__main__":
    main()
