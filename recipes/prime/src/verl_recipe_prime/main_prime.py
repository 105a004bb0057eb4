"""The recipe's entry point, ``verl-prime``.

    uv run --package verl-recipe-prime verl-prime [key=value ...]
        CPU default (configs/prime_cpu.yaml): the built-in multi-step arithmetic task and a tiny Qwen2
        warm-started on it, then PRIME; metrics and reward curve in trainer.default_local_dir.
    uv run --package verl-recipe-prime verl-prime reward.reward_model.enable=false
        The same run without the implicit PRM: RLOO on the outcome reward alone (the A/B baseline).
    uv run --package verl-recipe-prime verl-prime --config recipes/prime/configs/prime_eurus2_7b_sft.yaml ...
        Upstream's setting on GPUs (set data.train_files, data.val_files, actor_rollout_ref.model.path).

The config is core's schema plus the PRIME keys (``verl_recipe_prime.config``). Training is core's recipe
runner with `RayPRIMETrainer` and the PRM worker as ``Role.RewardModel``, on core's pools (its own pool
with ``reward.reward_model.enable_resource_pool``).
"""

from __future__ import annotations

from omegaconf import DictConfig
from verl.trainer.recipe_runner import Recipe

from verl_recipe_prime import cpu_assets
from verl_recipe_prime.config import PRIMETrainerConfig, load_prime_config, validate_prime_config

CPU_CONFIG = "prime_cpu.yaml"
PAPER_CONFIG = "prime_eurus2_7b_sft.yaml"


def role_worker_mapping(cfg: DictConfig, core_mapping: dict) -> dict:
    """Core's mapping, with the implicit PRM worker as the reward-model role when it is enabled."""
    from verl.registries import WORKER_CLASSES
    from verl.trainer.ppo.ray_trainer import Role

    from verl_recipe_prime.prm_worker import WORKER_NAME

    if not cfg.reward.reward_model.enable:
        return core_mapping
    return {**core_mapping, Role.RewardModel: WORKER_CLASSES.get(WORKER_NAME)}


RECIPE = Recipe(
    "prime", __file__, load=load_prime_config, validate=validate_prime_config, built_in=cpu_assets.built_in,
    roles=role_worker_mapping, trainer_cls="verl_recipe_prime.prime_ray_trainer:RayPRIMETrainer",
    summary=("val/*", "val-prm/*", "prime/all_acc/mean"), schema=PRIMETrainerConfig, about=__doc__,
)
