"""``verl-vlm-count``: GRPO on a tiny vision-language model that learns to count red squares on CPU.

    uv run --package verl-recipe-vlm-count verl-vlm-count [key=value ...]
        The CPU default (configs/vlm_count_cpu.yaml): writes the built-in counting task and a warm-started
        tiny Qwen2-VL under trainer.default_local_dir/assets, then GRPO through core's trainer (Ray,
        FSDP2 actor, HF rollout with pixel inputs, exact-match reward); held-out accuracy is val-core/*.
    uv run --package verl-recipe-vlm-count verl-vlm-count --config recipes/vlm_count/configs/geo3k_qwen2_5_vl_7b.yaml ...
        Upstream's Geometry3K setting (GPU; needs the model and data).

No stage override: vision-language support lives in core and verl-workers (image rows, multi_modal_inputs,
M-RoPE position ids, the engines' pixel inputs); this recipe is the task, the warm start and the config.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from omegaconf import DictConfig
from verl.trainer.config import load_config, validate_config
from verl.trainer.config.recipes import recipe_configs_dir

CPU_CONFIG = "vlm_count_cpu.yaml"
PAPER_CONFIG = "geo3k_qwen2_5_vl_7b.yaml"


def configs_dir() -> Path:
    """The recipe's configs: inside the package in a wheel, ``recipes/vlm_count/configs`` in the repo."""
    return recipe_configs_dir(__file__)


def load_recipe_config(argv: list[str], build_assets: bool = True) -> DictConfig:
    """Core's loader and validation (the CPU default when no --config); unset data/model paths point at
    the built-in task and warm-started model (built once, see ``cpu_assets``) when ``build_assets``."""
    from verl_recipe_vlm_count.cpu_assets import asset_overrides

    if not any(a == "--config" or a.startswith("--config=") for a in argv):
        argv = ["--config", str(configs_dir() / CPU_CONFIG), *argv]
    cfg = load_config(argv)
    if build_assets:
        extra = asset_overrides(cfg)
        if extra:
            cfg = load_config([*argv, *extra])
        validate_config(cfg)
    return cfg


def run(cfg: DictConfig) -> dict[str, float]:
    """Train through core's ``run_ppo`` (Ray, datasets with the model's processor, workers, tracker)."""
    from verl.trainer.main_ppo import run_ppo

    return run_ppo(cfg)


def main(argv: list[str] | None = None) -> None:
    """The ``verl-vlm-count`` command: ``--help``, ``--cfg job`` (the CPU default's resolved config), training;
    a config error prints its problems and exits with status 2."""
    from verl.trainer.config import PPOTrainerConfig
    from verl.trainer.config.cli import run_cli

    run_cli(argv, prog="verl-vlm-count", schema=PPOTrainerConfig, main=_main, load=lambda a: load_recipe_config(a, build_assets=False), about=__doc__)


def _main(argv: list[str] | None = None) -> None:
    # Under `uv run`, Ray would rebuild the environment for its workers; they share the driver's.
    os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
    run(load_recipe_config(list(sys.argv[1:] if argv is None else argv)))


if __name__ == "__main__":
    main()
