"""The recipe's entry point, ``verl-dapo``.

    uv run --package verl-recipe-dapo verl-dapo [key=value ...]
        CPU default (configs/dapo_cpu.yaml): builds a tiny Qwen2, warm-starts it with SFT on the
        built-in arithmetic task, then trains it with DAPO; metrics, reward curve in trainer.default_local_dir.
    uv run --package verl-recipe-dapo verl-dapo --config recipes/dapo/configs/dapo_qwen2.5_32b.yaml [key=value ...]
        The paper's setting on GPUs (set data.train_files, data.val_files, actor_rollout_ref.model.path).

DAPO is configuration of core (dynamic sampling is core's ``filter`` stage) and verl-rewards (the ``dapo``
reward manager's overlong buffer); everything else is core's recipe runner.
"""

from __future__ import annotations

from verl.trainer.recipe_runner import Recipe

from verl_recipe_dapo import cpu_assets

CPU_CONFIG = "dapo_cpu.yaml"
PAPER_CONFIG = "dapo_qwen2.5_32b.yaml"

RECIPE = Recipe("dapo", __file__, built_in=cpu_assets.built_in, summary=("dynamic_sampling/all_*/mean", "val/*/reward"),
                about=__doc__)
