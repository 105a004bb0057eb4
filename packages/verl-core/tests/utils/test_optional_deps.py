"""Optional dependencies are optional: a missing nicety (the reward plot) is a one-line notice, a missing
package the config asks for (a tracker, peft for LoRA) is a config error naming the install line, before
anything runs."""

import sys

import pytest
from verl.trainer.config import ConfigError, installed, load_config, validate_config
from verl.utils.tracking import Tracking

REQUIRED = ["data.train_files=train.parquet", "actor_rollout_ref.model.path=/models/tiny", "trainer.device=cpu"]


def test_tracking_without_matplotlib_trains_on_and_says_so_once(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    t = Tracking("p", "e", ["jsonl"], output_dir=str(tmp_path))
    for step in (1, 2, 3):
        t.log({"critic/score/mean": 0.1 * step, "val/arith/reward": 0.2}, step=step)
    t.finish()
    assert t.plot() is None
    assert not (tmp_path / "reward_curve.png").exists()
    assert len((tmp_path / "metrics.jsonl").read_text().splitlines()) == 3
    notices = [line for line in capsys.readouterr().err.splitlines() if "no reward plot" in line]
    assert notices == ["note: no reward plot: matplotlib is not installed (pip install 'verl-core[tracking]')"]


def _problems(*overrides):
    with pytest.raises(ConfigError) as ei:
        validate_config(load_config([*REQUIRED, *overrides]))
    return "\n".join(ei.value.problems)


def test_a_tracker_that_is_not_installed_is_a_config_error(monkeypatch):
    monkeypatch.setattr(installed, "_missing", lambda module: module in ("tensorboard", "swanlab"))
    text = _problems("trainer.logger=[console,tensorboard,swanlab]")
    assert "trainer.logger entry tensorboard needs tensorboard, which is not installed: pip install 'verl-core[tracking]'" in text
    assert "trainer.logger entry swanlab needs swanlab, which is not installed: pip install 'verl-core[swanlab]'" in text


def test_lora_without_peft_is_a_config_error(monkeypatch):
    monkeypatch.setattr(installed, "_missing", lambda module: module == "peft")
    text = _problems("actor_rollout_ref.model.lora_rank=8")
    assert "needs peft, which is not installed: pip install 'verl-workers[lora]'" in text


def test_missing_detects_absent_modules():
    assert installed._missing("verl_no_such_module_here")
    assert installed._missing("verl_no_such_parent.child")
    assert not installed._missing("json")
