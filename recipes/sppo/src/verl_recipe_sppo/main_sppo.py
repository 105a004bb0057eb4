"""The recipe's entry point, ``verl-sppo``.

    uv run --package verl-recipe-sppo verl-sppo [key=value ...]
        CPU default (configs/sppo_cpu.yaml): the built-in addition task and a tiny Qwen2 warm-started
        with core's SFT trainer, then SPPO; metrics and reward curve in trainer.default_local_dir.
    uv run --package verl-recipe-sppo verl-sppo --config recipes/sppo/configs/sppo_qwen2.5_7b_math.yaml [key=value ...]
        The upstream setting on GPUs (set data.train_files, data.val_files, actor_rollout_ref.model.path).

SPPO changes no stage of core's pipeline: its target is the ``sppo`` advantage estimator and its loss the
``sppo`` policy loss (``verl_recipe_sppo.algos``); the config is core's schema plus two keys
(``verl_recipe_sppo.config``); the rest is core's recipe runner.
"""

from __future__ import annotations

from omegaconf import DictConfig
from verl.trainer.recipe_runner import BuiltIn, Recipe

from verl_recipe_sppo.config import SPPOTrainerConfig, load_sppo_config, validate_sppo_config

CPU_CONFIG = "sppo_cpu.yaml"
PAPER_CONFIG = "sppo_qwen2.5_7b_math.yaml"
# SFT steps of the CPU default's warm start (core's demo: the tiny model then gets about a third of the
# held-out problems right, so the answers to one prompt often disagree and the win rates carry signal)
WARM_START_STEPS = 180


def built_in(cfg: DictConfig, built: BuiltIn) -> list[str]:
    """Core's built-in addition task and a tiny model warm-started on it (``verl.trainer.demo``)."""
    from verl.trainer.demo import asset_overrides

    return asset_overrides(cfg, WARM_START_STEPS)


RECIPE = Recipe("sppo", __file__, load=load_sppo_config, validate=validate_sppo_config, built_in=built_in,
                plugins=("verl_recipe_sppo.algos",), summary=("val/*/reward",),  # plugins: sppo estimator, loss
                schema=SPPOTrainerConfig, about=__doc__)
