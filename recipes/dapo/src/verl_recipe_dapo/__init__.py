"""DAPO (Decoupled Clip and Dynamic sAmpling Policy Optimization, arXiv 2503.14476) as a verl recipe.

    uv run --package verl-recipe-dapo verl-dapo                  # CPU default: tiny model, arithmetic
    uv run --package verl-recipe-dapo verl-dapo --config recipes/dapo/configs/dapo_qwen2.5_32b.yaml ...

DAPO's four changes are configuration of what core, verl-workers and verl-rewards offer: dynamic
sampling is core's ``filter`` stage (``algorithm.filter_groups``); see README.md.
"""
