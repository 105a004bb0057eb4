"""The recipe's entry point, ``verl-spin``.

    uv run --package verl-recipe-spin verl-spin [key=value ...]
        CPU default (configs/spin_cpu.yaml): the built-in addition task and a tiny Qwen2 warm-started
        with core's SFT trainer, then SPIN; metrics and reward curve in trainer.default_local_dir.
    uv run --package verl-recipe-spin verl-spin --config recipes/spin/configs/spin_qwen2.5_7b_gsm8k.yaml [key=value ...]
        The upstream setting on GPUs (set data.train_files, data.val_files, actor_rollout_ref.model.path).

The config is core's schema plus the recipe's keys (``verl_recipe_spin.config``); everything else is core's
recipe runner with `RaySPINTrainer` and the reference in the actor's process.
"""

from __future__ import annotations

from omegaconf import DictConfig
from verl.trainer.recipe_runner import BuiltIn, Recipe

from verl_recipe_spin.config import SPINTrainerConfig, load_spin_config, validate_spin_config

CPU_CONFIG = "spin_cpu.yaml"
PAPER_CONFIG = "spin_qwen2.5_7b_gsm8k.yaml"
# SFT steps of the CPU default's warm start (core's demo: the tiny model then gets about a third of the
# held-out problems right, so its answers are often wrong and the pairs carry a preference)
WARM_START_STEPS = 180


def built_in(cfg: DictConfig, built: BuiltIn) -> list[str]:
    """Core's built-in addition task and a tiny model warm-started on it (``verl.trainer.demo``)."""
    from verl.trainer.demo import asset_overrides

    return asset_overrides(cfg, WARM_START_STEPS)


def role_worker_mapping(cfg: DictConfig, core_mapping: dict) -> dict:
    """The actor, rollout and reference in one worker (the reference refresh copies weights in-process)."""
    from verl.registries import WORKER_CLASSES
    from verl.trainer.ppo.ray_trainer import Role

    return {Role.ActorRolloutRef: WORKER_CLASSES.get("actor_rollout_ref")}


RECIPE = Recipe(
    "spin", __file__, load=load_spin_config, validate=validate_spin_config, built_in=built_in, roles=role_worker_mapping,
    plugins=("verl_recipe_spin.algos",), trainer_cls="verl_recipe_spin.spin_ray_trainer:RaySPINTrainer",
    summary=("val/*/reward",), schema=SPINTrainerConfig, about=__doc__,
)  # plugins: registers the spin estimator and the dpo loss in the driver
