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

from verl.trainer.recipe_runner import Recipe

from verl_recipe_vlm_count import cpu_assets

CPU_CONFIG = "vlm_count_cpu.yaml"
PAPER_CONFIG = "geo3k_qwen2_5_vl_7b.yaml"

RECIPE = Recipe("vlm_count", __file__, built_in=cpu_assets.built_in, summary=("val-core/*",), about=__doc__)
