"""DAPO (Decoupled Clip and Dynamic sAmpling Policy Optimization, arXiv 2503.14476) as a verl recipe.

    uv run --package verl-recipe-dapo verl-dapo                  # CPU default: tiny model, arithmetic
    uv run --package verl-recipe-dapo verl-dapo --config recipes/dapo/configs/dapo_qwen2.5_32b.yaml ...

`RayDAPOTrainer` is core's PPO trainer with dynamic sampling in its filter stage; the other three DAPO
changes are configuration (see README.md).
"""

from verl_recipe_dapo.dynamic_sampling import DynamicSamplingError, GroupAccumulator

__all__ = ["DynamicSamplingError", "GroupAccumulator", "RayDAPOTrainer"]


def __getattr__(name: str):
    # The trainer pulls in Ray; keep `import verl_recipe_dapo` light.
    if name == "RayDAPOTrainer":
        from verl_recipe_dapo.dapo_ray_trainer import RayDAPOTrainer

        return RayDAPOTrainer
    raise AttributeError(f"module 'verl_recipe_dapo' has no attribute {name!r}")
