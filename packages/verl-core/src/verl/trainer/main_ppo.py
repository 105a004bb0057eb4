"""PPO-family training entry point.

    python -m verl.trainer.main_ppo data.train_files=train.parquet actor_rollout_ref.model.path=MODEL [key=value ...]
    python -m verl.trainer.main_ppo --config my_run.yaml [key=value ...]
    verl-ppo ...                                  (the console script; same arguments)

Worker classes come from ``verl.registries.WORKER_CLASSES`` (verl-workers), the reward manager from
``REWARD_MANAGERS`` (verl-rewards) and the tokenizer from ``TOKENIZER_LOADERS`` (verl-workers), so core
never imports those packages or transformers by name; a missing one is an error naming what to install.
"""

from __future__ import annotations

import os

from omegaconf import DictConfig

from verl.trainer.config import config_to_yaml, load_config, validate_config
from verl.trainer.ppo.run import (
    build_resource_pool_manager,
    build_role_worker_mapping,
    build_trainer,
    cpus_per_worker,
    load_processor,
    load_tokenizer,
    run_ppo,
)
from verl.utils.ray_start import ray_init_kwargs, reuse_driver_env_for_workers

# Upstream's entry module: what recipes and user code import from here lives in verl.trainer.ppo.run.
__all__ = [
    "build_resource_pool_manager",
    "build_role_worker_mapping",
    "build_trainer",
    "cpus_per_worker",
    "load_processor",
    "load_tokenizer",
    "ray_init_kwargs",
    "run_ppo",
    "checked_config",
    "main",
]


def main(argv: list[str] | None = None) -> None:
    """Command-line entry: ``--help``, ``--cfg job``; parse ``key=value`` / ``--config FILE``, validate once,
    train. With no arguments: the embedded default (``verl.trainer.demo``)."""
    from verl.trainer.config.cli import run_cli

    run_cli(argv, prog="verl-ppo", main=_train, about=__doc__)


def checked_config(args: list[str]) -> DictConfig:
    """``main_ppo``'s config from its arguments: loaded and validated (then read-only), before Ray starts."""
    config = load_config(args)
    validate_config(config)
    return config


def _train(args: list[str]) -> None:
    reuse_driver_env_for_workers()
    from verl.trainer.ppo.ray_trainer import NothingToTrainError

    if not args:
        # No arguments: the embedded default (tiny model, built-in task, SFT warm start, then GRPO).
        from verl.trainer.demo import main as demo_main

        demo_main([])
        return
    config = checked_config(args)
    # Hydra's run directory (hydra.run.dir=...): its .hydra/config.yaml and overrides.yaml, as upstream's
    # @hydra.main writes them (load_config refused every hydra.* setting it does not read)
    from verl.trainer.config.hydra_run import split_hydra, write_run_dir

    run_dir = write_run_dir(split_hydra(args)[1], config_to_yaml(config))
    if run_dir is not None:
        print(f"hydra run directory: {os.path.abspath(run_dir)}", flush=True)
    try:
        run_ppo(config)
    except NothingToTrainError as e:
        # Loud and non-zero: a finished run re-launched must not look like a successful training run.
        raise SystemExit(f"error: {e}") from e


if __name__ == "__main__":
    main()
