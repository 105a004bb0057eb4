"""Smoke test of the vlm_count recipe: its CPU config loads and validates, and its trainer hook runs.

TODO before merging (CONTRIBUTING.md): an end-to-end CPU run of the recipe (``@pytest.mark.e2e``,
``@pytest.mark.slow``, under ~90 s), and unit tests of each change against hand-derived values.
"""

import torch

from verl.protocol import DataProto
from verl.trainer.ppo.ray_trainer import RayPPOTrainer
from verl_recipe_vlm_count.main import load_recipe_config
from verl_recipe_vlm_count.trainer import RayVlmCountTrainer


def test_cpu_config_loads_and_validates(tmp_path):
    from verl.utils.dataset import write_parquet
    from verl.utils.dataset.tasks import make_arithmetic_rows
    from verl.workers.tiny import build_tiny_qwen2

    train = write_parquet(make_arithmetic_rows(16, seed=0, digits=1), tmp_path / "train.parquet")
    build_tiny_qwen2(tmp_path / "model", size="xs")
    cfg = load_recipe_config([
        f"data.train_files={train}", f"actor_rollout_ref.model.path={tmp_path / 'model'}",
        "trainer.total_training_steps=1",
    ])
    assert cfg.trainer.device == "cpu" and cfg.trainer.total_training_steps == 1
    assert cfg.trainer.project_name == "vlm_count"


def test_trainer_is_a_core_trainer_with_the_hook():
    assert issubclass(RayVlmCountTrainer, RayPPOTrainer)
    trainer = RayVlmCountTrainer.__new__(RayVlmCountTrainer)  # no workers needed to call one stage
    batch = DataProto.from_dict(tensors={"responses": torch.arange(6).reshape(3, 2)})
    out = trainer._stage_filter(batch, {})
    assert out is not None and out.batch["responses"].tolist() == [[0, 1], [2, 3], [4, 5]]
