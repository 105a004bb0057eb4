"""Shared by the recipe's end-to-end tests: the addition task and a random-init tiny model (no warm start:
the runs check the machinery, not learning; the README's measured run shows learning)."""

import pytest


@pytest.fixture(scope="session")
def assets(tmp_path_factory):
    from verl.trainer.demo import build_model, write_data

    root = tmp_path_factory.mktemp("fully_async_assets")
    data = write_data(root / "data")
    model = build_model(root / "base_model")
    return [f"data.train_files={data['train']}", f"data.val_files={data['test']}", f"actor_rollout_ref.model.path={model}"]
