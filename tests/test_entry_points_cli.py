"""Every entry point's command line: --help lists the groups and common keys, --cfg job prints the resolved
config, a config error is a message with exit status 2 (VERL_DEBUG=1: the ConfigError with its traceback)."""

import importlib

import pytest
from verl.trainer.config import ConfigError

ENTRY_POINTS = {
    "verl-ppo": "verl.trainer.main_ppo:main",
    "verl-sft": "verl.trainer.sft_trainer:main",
    "verl-dapo": "verl_recipe_dapo.main_dapo:RECIPE.main",
    "verl-sppo": "verl_recipe_sppo.main_sppo:RECIPE.main",
    "verl-spin": "verl_recipe_spin.main_spin:RECIPE.main",
    "verl-prime": "verl_recipe_prime.main_prime:RECIPE.main",
    "verl-retool": "verl_recipe_retool.main:RECIPE.main",
    "verl-collabllm": "verl_recipe_collabllm.main:RECIPE.main",
    "verl-vlm-count": "verl_recipe_vlm_count.main:RECIPE.main",
    "verl-fully-async": "verl_recipe_fully_async.main:RECIPE.main",
    "verl-one-step-off": "verl_recipe_fully_async.main:ONE_STEP_OFF.main",
}
# a key every entry point has, with a non-default value
KEY = {"verl-sft": ("trainer.project_name", "p123")}


def _main(name):
    """The console script's object, resolved as the installer's wrapper does (``module:attr.attr``)."""
    module, attrs = ENTRY_POINTS[name].split(":")
    obj = importlib.import_module(module)
    for attr in attrs.split("."):
        obj = getattr(obj, attr)
    return obj


def _run(name, argv):
    with pytest.raises(SystemExit) as ei:
        _main(name)(argv)
    return ei.value.code


@pytest.mark.parametrize("name", ENTRY_POINTS)
def test_help_lists_groups_and_common_keys_with_defaults(name, capsys):
    assert _run(name, ["--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: {name} ") and "config groups:" in out and "trainer " in out
    assert "common keys" in out and "trainer.n_gpus_per_node=8\n" in out and "--help-all" in out
    assert "docs/config-reference.md" in out


@pytest.mark.parametrize("name", ENTRY_POINTS)
def test_cfg_job_prints_the_resolved_config(name, capsys):
    key, value = KEY.get(name, ("trainer.experiment_name", "x123"))
    assert _run(name, ["--cfg", "job", f"{key}={value}"]) == 0
    out = capsys.readouterr().out
    assert f"  {key.split('.')[-1]}: {value}\n" in out and "${" not in out


@pytest.mark.parametrize("name", ENTRY_POINTS)
def test_config_error_exits_2_with_the_problems_and_no_traceback(name, capsys, monkeypatch):
    monkeypatch.delenv("VERL_DEBUG", raising=False)
    assert _run(name, ["trainer.no_such_key=1", "trainer.n_gpus_per_node=abc"]) == 2
    err = capsys.readouterr().err
    assert "unknown key 'trainer.no_such_key'" in err and "trainer.n_gpus_per_node='abc'" in err
    assert "Traceback" not in err and err.startswith(f"{name}: invalid")
    monkeypatch.setenv("VERL_DEBUG", "1")
    with pytest.raises(ConfigError, match="no_such_key"):
        _main(name)(["trainer.no_such_key=1"])
