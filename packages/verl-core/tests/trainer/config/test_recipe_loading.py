"""The shared recipe loader: problems in what the user set are reported before any asset is made."""

from __future__ import annotations

import pytest
from verl.trainer.config import ConfigError, load_config, validate_config
from verl.trainer.config.recipes import BUILT_IN, load_with_built_in, with_default_config

MADE = ("data.train_files", "actor_rollout_ref.model.path")


def _args(tmp_path, *extra):
    return [f"trainer.default_local_dir={tmp_path}", "trainer.device=cpu", *extra]


def test_bad_key_is_reported_before_assets_are_made(tmp_path):
    made: list[list[str]] = []

    def overrides(cfg, unset):
        made.append(unset)
        return []

    with pytest.raises(ConfigError, match="ppo_epochs"):
        load_with_built_in(
            _args(tmp_path, "actor_rollout_ref.actor.ppo_epochs=0"),
            load_config,
            validate_config,
            MADE,
            overrides,
        )
    assert made == []  # the slow part never ran


def test_overrides_fill_the_unset_keys(tmp_path):
    data = tmp_path / "train.parquet"
    data.write_bytes(b"")
    seen: list[list[str]] = []

    def overrides(cfg, unset):
        seen.append(unset)
        return [f"data.train_files={data}", f"actor_rollout_ref.model.path={tmp_path}"]

    cfg = load_with_built_in(_args(tmp_path), load_config, validate_config, MADE, overrides)
    assert seen == [list(MADE)]
    assert cfg.data.train_files == str(data) and cfg.actor_rollout_ref.model.path == str(tmp_path)
    assert BUILT_IN not in str(cfg)  # the placeholder only ever served the early check


def test_made_may_depend_on_the_config(tmp_path):
    calls = []
    cfg = load_with_built_in(
        _args(tmp_path, f"data.train_files={tmp_path}/x", f"actor_rollout_ref.model.path={tmp_path}"),
        load_config,
        validate_config,
        lambda cfg: calls.append(cfg.trainer.device) or MADE,
        lambda cfg, unset: calls.append(tuple(unset)) or [],
    )
    assert calls == ["cpu", ()]  # nothing unset: no early check, no overrides
    assert cfg.actor_rollout_ref.model.path == str(tmp_path)


def test_with_default_config_keeps_a_given_config(tmp_path):
    default = tmp_path / "d.yaml"
    assert with_default_config(["a=1"], default) == ["--config", str(default), "a=1"]
    assert with_default_config(["--config=x.yaml", "a=1"], default) == ["--config=x.yaml", "a=1"]
