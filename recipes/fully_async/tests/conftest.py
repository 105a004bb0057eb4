"""Shared by the recipe's end-to-end tests: the addition task and a random-init tiny model (no warm start:
the runs check the machinery, not learning; the README's measured run shows learning)."""

import pytest


@pytest.fixture(scope="session")
def assets(tmp_path_factory):
    from verl_recipe_fully_async import cpu_assets

    root = tmp_path_factory.mktemp("fully_async_assets")
    train, test = cpu_assets.write_task(root / "data")
    model = cpu_assets.warm_start_model(root, steps=0)
    return [f"data.train_files={train}", f"data.val_files={test}", f"actor_rollout_ref.model.path={model}"]
