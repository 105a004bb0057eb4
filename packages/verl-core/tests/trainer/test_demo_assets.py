"""``demo.warm_started_assets``: built once, reused while the record matches, rebuilt when it does not.
The SFT run itself is replaced by a stand-in here (the e2e tests run the real one)."""

import json

from verl.trainer import demo


def _fake_pipeline(monkeypatch, calls: list[str]):
    def write_data(data_dir):
        calls.append("data")
        data_dir.mkdir(parents=True, exist_ok=True)
        files = {k: data_dir / f"{k}.parquet" for k in ("train", "test", "sft")}
        for f in files.values():
            f.write_text("rows")
        return {**{k: str(v) for k, v in files.items()}, "n_train": 3, "n_test": 1}

    def build_model(model_dir):
        calls.append("model")
        model_dir.mkdir(parents=True, exist_ok=True)
        return str(model_dir)

    def run_sft(cfg):
        calls.append(f"sft:{cfg.trainer.total_training_steps}")
        hf = tmp_root[0] / "sft" / "hf"
        hf.mkdir(parents=True, exist_ok=True)
        return {"hf_model": str(hf)}

    tmp_root: list = []
    monkeypatch.setattr(demo, "write_data", write_data)
    monkeypatch.setattr(demo, "build_model", build_model)
    monkeypatch.setattr("verl.trainer.sft_trainer.run_sft", run_sft)
    return tmp_root


def test_assets_are_built_once_and_rebuilt_for_another_step_count(monkeypatch, tmp_path):
    calls: list[str] = []
    _fake_pipeline(monkeypatch, calls).append(tmp_path / "assets")
    first = demo.warm_started_assets(tmp_path / "assets", sft_steps=7, workers=2)
    assert calls == ["data", "model", "sft:7"]
    assert first["model"] == str(tmp_path / "assets" / "sft" / "hf")
    assert json.loads((tmp_path / "assets" / "warm_start.json").read_text())["sft_steps"] == 7
    assert demo.warm_started_assets(tmp_path / "assets", sft_steps=7) == first  # reused: nothing ran
    assert calls == ["data", "model", "sft:7"]
    demo.warm_started_assets(tmp_path / "assets", sft_steps=9)
    assert calls[3:] == ["data", "model", "sft:9"]


def test_asset_overrides_fill_only_what_the_config_leaves_unset(monkeypatch, tmp_path):
    from verl.trainer.config import load_config

    calls: list[str] = []
    _fake_pipeline(monkeypatch, calls).append(tmp_path / "run" / "assets")
    base = [f"trainer.default_local_dir={tmp_path / 'run'}", "trainer.n_gpus_per_node=2"]
    assets = tmp_path / "run" / "assets"
    got = demo.asset_overrides(load_config(base), sft_steps=5)
    assert got == [f"data.train_files={assets / 'data' / 'train.parquet'}", f"data.val_files={assets / 'data' / 'test.parquet'}",
                   f"actor_rollout_ref.model.path={assets / 'sft' / 'hf'}"]
    assert calls == ["data", "model", "sft:5"]
    assert demo.asset_overrides(load_config([*base, "actor_rollout_ref.model.path=/m"]), sft_steps=5) == got[:2]
    assert demo.asset_overrides(load_config([*base, "actor_rollout_ref.model.path=/m", "data.train_files=/t"])) == []
    assert calls == ["data", "model", "sft:5"]  # reused, then not needed
