"""The recipe's entry point, ``verl-sppo``.

    uv run --package verl-recipe-sppo verl-sppo [key=value ...]
        CPU default (configs/sppo_cpu.yaml): the built-in addition task and a tiny Qwen2 warm-started
        with core's SFT trainer, then SPPO; metrics and reward curve in trainer.default_local_dir.
    uv run --package verl-recipe-sppo verl-sppo --config recipes/sppo/configs/sppo_qwen2.5_7b_math.yaml [key=value ...]
        The upstream setting on GPUs (set data.train_files, data.val_files, actor_rollout_ref.model.path).

Config order (later wins): core's defaults < ``--config`` files (the CPU default when none is given) <
``key=value`` overrides, over core's schema plus the recipe's keys (``verl_recipe_sppo.config``).
SPPO changes no stage of core's loop: its target is the ``sppo`` advantage estimator and its loss the
``sppo`` policy loss (``verl_recipe_sppo.algos``), so training is core's ``run_ppo`` as it is.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from omegaconf import DictConfig
from verl.trainer.config.recipes import load_with_built_in, recipe_configs_dir
from verl.trainer.config.recipes import with_default_config as _with_default_config

CPU_CONFIG = "sppo_cpu.yaml"
PAPER_CONFIG = "sppo_qwen2.5_7b_math.yaml"
# SFT steps of the CPU default's warm start (core's demo: the tiny model then gets about a third of the
# held-out problems right, so the answers to one prompt often disagree and the win rates carry signal)
WARM_START_STEPS = 180


def configs_dir() -> Path:
    """The recipe's configs: inside the package in a wheel, ``recipes/sppo/configs`` in the repo."""
    return recipe_configs_dir(__file__)


def with_default_config(argv: list[str]) -> list[str]:
    """Prepend ``--config <CPU default>`` unless the command line names a config file."""
    return _with_default_config(argv, configs_dir() / CPU_CONFIG)


def load_recipe_config(argv: list[str]) -> DictConfig:
    """Load (CPU default when no ``--config``); when the config leaves the model or data unset, point it
    at core's built-in addition task and a tiny model warm-started on it (``verl.trainer.demo``, built
    under ``{trainer.default_local_dir}/assets`` once); validate. The result is read-only."""
    from verl.trainer.demo import asset_overrides

    from verl_recipe_sppo.config import load_sppo_config, validate_sppo_config

    return load_with_built_in(
        with_default_config(argv),
        load_sppo_config,
        validate_sppo_config,
        made=("data.train_files", "actor_rollout_ref.model.path"),
        overrides=lambda cfg, _unset: asset_overrides(cfg, WARM_START_STEPS),
    )


def run_sppo(cfg: DictConfig) -> dict[str, float]:
    """Train with a validated config through core's ``main_ppo.run_ppo`` (Ray, datasets, reward manager,
    workers, tracker); the estimator and loss are found by name. Returns the last step's metrics."""
    from verl.trainer.main_ppo import run_ppo

    import verl_recipe_sppo.algos  # noqa: F401  (registers sppo, sppo_win_rate in this process)

    return run_ppo(cfg)


def train(argv: list[str]) -> dict[str, float]:
    """Load the config from ``argv`` and train; returns the last step's metrics."""
    return run_sppo(load_recipe_config(argv))


def main(argv: list[str] | None = None) -> None:
    """The ``verl-sppo`` command: ``--help``, ``--cfg job`` (the CPU default's resolved config), training;
    a config error prints its problems and exits with status 2."""
    from verl.trainer.config.cli import run_cli

    from verl_recipe_sppo.config import SPPOTrainerConfig, load_sppo_config

    run_cli(argv, prog="verl-sppo", schema=SPPOTrainerConfig, main=_main, load=lambda a: load_sppo_config(with_default_config(a)), about=__doc__)


def _main(argv: list[str] | None = None) -> None:
    """The ``verl-sppo`` console script (returns None: a returned value would become the exit status)."""
    # Under `uv run`, Ray would rebuild the environment for its workers; they share the driver's.
    # Ray reads this when first imported, hence before anything imports it.
    os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
    cfg = load_recipe_config(list(sys.argv[1:] if argv is None else argv))
    metrics = run_sppo(cfg)  # core prints where the config, metrics and plot went
    val = {k: v for k, v in metrics.items() if k.startswith("val/") and k.endswith("/reward")}
    print(f"SPPO finished at step {metrics.get('training/global_step')}: {val}", flush=True)


if __name__ == "__main__":
    main()
