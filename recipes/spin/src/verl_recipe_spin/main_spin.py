"""The recipe's entry point, ``verl-spin``.

    uv run --package verl-recipe-spin verl-spin [key=value ...]
        CPU default (configs/spin_cpu.yaml): the built-in addition task and a tiny Qwen2 warm-started
        with core's SFT trainer, then SPIN; metrics and reward curve in trainer.default_local_dir.
    uv run --package verl-recipe-spin verl-spin --config recipes/spin/configs/spin_qwen2.5_7b_gsm8k.yaml [key=value ...]
        The upstream setting on GPUs (set data.train_files, data.val_files, actor_rollout_ref.model.path).

Config order (later wins): core's defaults < ``--config`` files (the CPU default when none is given) <
``key=value`` overrides, over core's schema plus the recipe's keys (``verl_recipe_spin.config``).
Everything else (Ray start, datasets, reward manager, pools, tracker) is core's ``main_ppo.run_ppo``
with `RaySPINTrainer` and the reference in the actor's process.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from omegaconf import DictConfig
from verl.trainer.config.recipes import load_with_built_in, recipe_configs_dir
from verl.trainer.config.recipes import with_default_config as _with_default_config

CPU_CONFIG = "spin_cpu.yaml"
PAPER_CONFIG = "spin_qwen2.5_7b_gsm8k.yaml"
# SFT steps of the CPU default's warm start (core's demo: the tiny model then gets about a third of the
# held-out problems right, so its answers are often wrong and the pairs carry a preference)
WARM_START_STEPS = 180


def configs_dir() -> Path:
    """The recipe's configs: inside the package in a wheel, ``recipes/spin/configs`` in the repo."""
    return recipe_configs_dir(__file__)


def with_default_config(argv: list[str]) -> list[str]:
    """Prepend ``--config <CPU default>`` unless the command line names a config file."""
    return _with_default_config(argv, configs_dir() / CPU_CONFIG)


def load_recipe_config(argv: list[str]) -> DictConfig:
    """Load (CPU default when no ``--config``); when the config leaves the model or data unset, point it
    at core's built-in addition task and a tiny model warm-started on it (``verl.trainer.demo``, built
    under ``{trainer.default_local_dir}/assets`` once); validate. The result is read-only."""
    from verl.trainer.demo import asset_overrides

    from verl_recipe_spin.config import load_spin_config, validate_spin_config

    return load_with_built_in(
        with_default_config(argv),
        load_spin_config,
        validate_spin_config,
        made=("data.train_files", "actor_rollout_ref.model.path"),
        overrides=lambda cfg, _unset: asset_overrides(cfg, WARM_START_STEPS),
    )


def role_worker_mapping() -> dict:
    """The actor, rollout and reference in one worker (the reference refresh copies weights in-process)."""
    from verl.registries import WORKER_CLASSES
    from verl.trainer.ppo.ray_trainer import Role

    return {Role.ActorRolloutRef: WORKER_CLASSES.get("actor_rollout_ref")}


def run_spin(cfg: DictConfig) -> dict[str, float]:
    """Train with a validated config through core's ``main_ppo.run_ppo`` with `RaySPINTrainer`.
    Returns the last step's metrics."""
    from verl.trainer.main_ppo import run_ppo

    import verl_recipe_spin.algos  # noqa: F401  (registers spin, dpo in this process)
    from verl_recipe_spin.spin_ray_trainer import RaySPINTrainer

    return run_ppo(cfg, trainer_cls=RaySPINTrainer, role_worker_mapping=role_worker_mapping())


def train(argv: list[str]) -> dict[str, float]:
    """Load the config from ``argv`` and train; returns the last step's metrics."""
    return run_spin(load_recipe_config(argv))


def main(argv: list[str] | None = None) -> None:
    """The ``verl-spin`` command: ``--help``, ``--cfg job`` (the CPU default's resolved config), training;
    a config error prints its problems and exits with status 2."""
    from verl.trainer.config.cli import run_cli

    from verl_recipe_spin.config import SPINTrainerConfig, load_spin_config

    run_cli(argv, prog="verl-spin", schema=SPINTrainerConfig, main=_main, load=lambda a: load_spin_config(with_default_config(a)), about=__doc__)


def _main(argv: list[str] | None = None) -> None:
    """The ``verl-spin`` console script (returns None: a returned value would become the exit status)."""
    # Under `uv run`, Ray would rebuild the environment for its workers; they share the driver's.
    # Ray reads this when first imported, hence before anything imports it.
    os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
    cfg = load_recipe_config(list(sys.argv[1:] if argv is None else argv))
    metrics = run_spin(cfg)  # core prints where the config, metrics and plot went
    val = {k: v for k, v in metrics.items() if k.startswith("val/") and k.endswith("/reward")}
    print(f"SPIN finished at step {metrics.get('training/global_step')}: {val}", flush=True)


if __name__ == "__main__":
    main()
