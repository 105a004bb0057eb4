"""The recipe runner's config path without training: the CPU default files, validation before and after
the built-in assets, what a built-in gets, absolute paths, the recipe's checks and the summary line.
Training through it is every recipe's smoke test."""

from contextlib import ExitStack

import pytest
from verl.trainer.config import ConfigError, load_config
from verl.trainer.recipe_runner import BuiltIn, Recipe, _resolve, validate_with

CPU_YAML = """\
data:
  train_batch_size: 4
actor_rollout_ref:
  actor:
    ppo_mini_batch_size: 2
    ppo_micro_batch_size_per_gpu: 2
  rollout:
    n: 2
trainer:
  device: cpu
  n_gpus_per_node: 1
"""


@pytest.fixture
def recipe_dir(tmp_path):
    """A recipe's layout: ``src/<package>/main.py`` next to ``configs/``."""
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "cpu.yaml").write_text(CPU_YAML)
    (tmp_path / "configs" / "more.yaml").write_text("trainer:\n  total_training_steps: 3\n")
    module = tmp_path / "src" / "pkg" / "main.py"
    module.parent.mkdir(parents=True)
    module.write_text("")
    return tmp_path, str(module)


def test_cpu_default_files_unless_the_command_line_names_one(recipe_dir):
    root, module = recipe_dir
    r = Recipe(name="r", module_file=module, cpu_configs=("cpu.yaml", "more.yaml"))
    assert r.configs_dir == root / "configs"
    assert r.with_default_config(["a=1"]) == [
        "--config", str(root / "configs" / "cpu.yaml"), "--config", str(root / "configs" / "more.yaml"), "a=1",
    ]  # fmt: skip
    assert r.with_default_config(["--config=x.yaml", "a=1"]) == ["--config=x.yaml", "a=1"]
    cfg = r.load_config(["data.train_files=t.parquet", "actor_rollout_ref.model.path=m"])
    assert cfg.data.train_batch_size == 4 and cfg.trainer.total_training_steps == 3
    # a named file as it stands: later files and then the overrides win, nothing is validated
    cfg = r.load_file("cpu.yaml", "more.yaml", overrides=["data.train_batch_size=3"])
    assert (cfg.data.train_batch_size, cfg.trainer.total_training_steps, cfg.data.train_files) == (3, 3, None)
    assert r.load_file("more.yaml").data.train_batch_size != 4  # core's default, not the CPU file's


def _hermes_registered(monkeypatch):
    """multi_turn.format's default (hermes) comes from verl-agent, absent from verl-core's own environment;
    a placeholder entry lets validation pass here (the format is never called)."""
    from verl.registries import TOOL_CALL_FORMATS

    if "hermes" not in TOOL_CALL_FORMATS.names():
        monkeypatch.setitem(TOOL_CALL_FORMATS, "hermes", object())


def test_built_in_fills_unset_keys_after_the_config_is_checked(recipe_dir, tmp_path, monkeypatch):
    _, module = recipe_dir
    _hermes_registered(monkeypatch)
    seen = {}
    tools = tmp_path / "work" / "tools.yaml"
    tools.parent.mkdir()
    tools.write_text("tools: []\n")
    monkeypatch.chdir(tools.parent)  # the tool config is given relative to where the driver runs

    def built_in(cfg, built: BuiltIn):
        seen.update(unset=built.unset, root=built.root, stack=built.stack)
        return [f"data.train_files={built.root / 'train.parquet'}", "actor_rollout_ref.model.path=/models/tiny"]

    key = "actor_rollout_ref.rollout.multi_turn.tool_config_path"
    r = Recipe(name="r", module_file=module, cpu_configs=("cpu.yaml",), built_in=built_in, absolute_paths=(key,))
    out = tmp_path / "out"
    with ExitStack() as stack:
        cfg = r.load_config([f"trainer.default_local_dir={out}", "actor_rollout_ref.rollout.multi_turn.enable=true",
                             f"{key}=tools.yaml"], stack)  # fmt: skip
        assert seen["stack"] is stack
    assert seen["unset"] == ["data.train_files", "actor_rollout_ref.model.path"]
    assert seen["root"] == out.resolve() / "assets"
    assert cfg.data.train_files == str(out.resolve() / "assets" / "train.parquet")
    assert cfg.actor_rollout_ref.model.path == "/models/tiny"
    assert cfg.actor_rollout_ref.rollout.multi_turn.tool_config_path == str(tools)

    # a bad key is reported before anything is built
    seen.clear()
    with pytest.raises(ConfigError, match="not divisible by"):
        r.load_config([f"trainer.default_local_dir={out}", "data.train_batch_size=3", "trainer.n_gpus_per_node=4"])
    assert seen == {}


def test_validate_with_adds_the_recipes_checks_to_cores_in_one_error():
    validate = validate_with(lambda cfg: [f"my.key needs rollout.n >= 3, got {cfg.actor_rollout_ref.rollout.n}"])
    cfg = load_config(["data.train_files=t", "actor_rollout_ref.model.path=m", "trainer.device=cpu",
                       "actor_rollout_ref.rollout.n=2", "data.train_batch_size=3",
                       "trainer.n_gpus_per_node=4"])  # fmt: skip
    with pytest.raises(ConfigError) as err:
        validate(cfg)
    problems = err.value.problems
    assert "not divisible" in problems[0] and problems[-1] == "my.key needs rollout.n >= 3, got 2"


def test_summary_line_and_trainer_class_by_name(recipe_dir):
    _, module = recipe_dir
    r = Recipe(name="DAPO", module_file=module, cpu_configs=("cpu.yaml",), summary=("val/*/reward", "x/mean"))
    line = r.summary_line({"training/global_step": 7, "val/a/reward": 0.51234, "val/a/n": 3, "x/mean": 1.0})
    assert line == "DAPO finished at step 7: {'val/a/reward': 0.5123, 'x/mean': 1.0}"
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    assert _resolve("verl.trainer.ppo.ray_trainer:RayPPOTrainer") is RayPPOTrainer
    with pytest.raises(ValueError, match="expected 'package.module:ClassName'"):
        _resolve("verl.trainer.ppo.ray_trainer.RayPPOTrainer")
