"""The read-or-refused audit (scripts/config_audit.py): its checks on a planted silent key, and the audit of
every entry point's CPU default (slow: each group is a one-step training run)."""

import importlib.util
import os
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _script(name: str):
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod  # dataclasses look their module up
        spec.loader.exec_module(mod)
    return sys.modules[name]


audit = _script("config_audit")
entries = _script("config_audit_entries")
recipes = _script("config_audit_recipes")

REQUIRED = ["data.train_files=train.parquet", "actor_rollout_ref.model.path=/models/tiny", "trainer.device=cpu"]


def _cfg(*overrides):
    from verl.trainer.config import load_config

    return load_config([*REQUIRED, *overrides])


def test_non_default_keys_are_those_set_to_another_value_than_their_resolved_default():
    from verl.trainer.config import PPOTrainerConfig

    cfg = _cfg("actor_rollout_ref.actor.ppo_epochs=2", "actor_rollout_ref.actor.shuffle=false",
               "+reward.reward_kwargs.alpha=1")  # fmt: skip
    got = audit.non_default(PPOTrainerConfig, cfg)
    assert got == {
        "data.train_files": "train.parquet",
        "actor_rollout_ref.model.path": "/models/tiny",
        "trainer.device": "cpu",
        "actor_rollout_ref.actor.ppo_epochs": 2,
        "reward.reward_kwargs.alpha": 1,
    }  # critic.ppo_epochs follows the actor's (2): at its default; shuffle=false is the default


def test_a_key_read_while_it_follows_another_counts_for_that_key():
    from verl.trainer.config import PPOTrainerConfig

    cfg = _cfg("data.max_response_length=7")
    # the rollout reads its own response_length, which follows data.max_response_length
    assert "data.max_response_length" not in audit.unread(PPOTrainerConfig, cfg, {"actor_rollout_ref.rollout.response_length"})
    assert "data.max_response_length" in audit.unread(PPOTrainerConfig, cfg, set())
    # set on its own, the follower no longer stands for the key it followed
    cfg = _cfg("data.max_response_length=7", "actor_rollout_ref.rollout.response_length=5")
    left = audit.unread(PPOTrainerConfig, cfg, {"actor_rollout_ref.rollout.response_length"})
    assert left == {"data.max_response_length": 7, "data.train_files": "train.parquet",
                    "actor_rollout_ref.model.path": "/models/tiny", "trainer.device": "cpu"}  # fmt: skip


def test_probe_keeps_what_validation_accepts_and_the_message_of_what_it_refuses():
    group = entries.Group("probe", keys=("actor_rollout_ref.actor.kl_loss_coef", "actor_rollout_ref.actor.ppo_epochs",
                                         "actor_rollout_ref.rollout.gpu_memory_utilization"))  # fmt: skip
    entry = entries.Entry("main_ppo", "verl.trainer.main_ppo:main", "verl.trainer.config:PPOTrainerConfig",
                          entries.main_check, REQUIRED, [group])  # fmt: skip
    r = audit.probe(entry, group, [], [])
    assert r.error == "" and r.accepted == {"actor_rollout_ref.actor.ppo_epochs": 2}
    assert "is read only when actor_rollout_ref.actor.use_kl_loss=true" in r.refused["actor_rollout_ref.actor.kl_loss_coef"]
    assert "read by the vllm and sglang rollout only" in r.refused["actor_rollout_ref.rollout.gpu_memory_utilization"]


ENTRY = '''
"""A stand-in entry point: loads and validates like main_ppo, reads what PLANT_READS names, writes config.yaml."""
import os
from pathlib import Path
from omegaconf import OmegaConf
from verl.trainer.config import config_to_yaml, load_config, validate_config

def main(argv):
    cfg = load_config(argv)
    validate_config(cfg)
    for key in os.environ["PLANT_READS"].split(","):
        OmegaConf.select(cfg, key)
    out = Path(cfg.trainer.default_local_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.yaml").write_text(config_to_yaml(cfg))
'''


@pytest.mark.parametrize("reads", ["read", "silent"])
def test_the_audit_lists_a_key_the_run_never_reads(tmp_path, monkeypatch, reads):
    """Through the real child process and recorder: a set key that nothing reads is listed, and only it."""
    (tmp_path / "planted_entry.py").write_text(textwrap.dedent(ENTRY))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    always = "data.train_files,actor_rollout_ref.model.path,trainer.device,trainer.worker_backend,trainer.n_gpus_per_node"
    monkeypatch.setenv("PLANT_READS", always + (",actor_rollout_ref.actor.ppo_epochs" if reads == "read" else ""))
    group = entries.Group("planted", keys=("actor_rollout_ref.actor.ppo_epochs",))
    entry = entries.Entry("planted", "planted_entry:main", "verl.trainer.config:PPOTrainerConfig", entries.main_check,
                          [*REQUIRED, "trainer.worker_backend=local", "trainer.n_gpus_per_node=1"], [group])  # fmt: skip
    r = audit.probe(entry, group, [], [])
    assert r.accepted == {"actor_rollout_ref.actor.ppo_epochs": 2}
    r = audit.run_group(entry, group, r, [], [], tmp_path / "work", timeout=300)
    assert r.error == ""
    assert r.unread == ({} if reads == "read" else {"actor_rollout_ref.actor.ppo_epochs": 2})


def test_every_switch_of_a_gate_is_set_by_some_group():
    """Switches are never probed beside the keys they gate; each must open (or shut) its gate in a context."""
    from verl.trainer.config import PPOTrainerConfig, schema_fields
    from verl.trainer.config.fields import interpolation_target

    main = entries.MAIN_ENTRY
    contexts = {c.split("=", 1)[0].lstrip("+~") for g in main.groups for c in [*g.context, *main.base]}
    fields = schema_fields(PPOTrainerConfig)
    missing = {
        k for k in entries.switches(PPOTrainerConfig) - contexts
        if interpolation_target(k, fields[k].default) not in contexts  # set through the key it follows
    }
    assert missing <= {"data.val_files"}, sorted(missing)  # the assets set it


@pytest.mark.parametrize("name", [e.name for e in recipes.ENTRIES])  # slow, e2e: the config_audit fixture
def test_every_key_set_is_read_or_refused(config_audit, name, request):
    """Each entry point's CPU default, shortened, with every probed key at a non-default value, group by
    group: nothing accepted goes unread (scripts/config_audit.py; docs/config-audit.md). main_ppo's runs here;
    each recipe's runs in its own package's tests (its CI entry, its exact environment), and here too with
    ``--config-audit-recipes``."""
    if name != recipes.MAIN_ENTRY.name and not request.config.getoption("--config-audit-recipes"):
        pytest.skip("a recipe's audit runs in its own package's tests (recipes/*/tests/test_config_audit.py); "
                    "--config-audit-recipes runs it here too")
    config_audit(name)


def test_every_recipe_entry_is_audited_in_its_own_package():
    """CI runs a recipe's audit in the recipe's own entry: each recipe entry point is named by the audit test of
    the package that holds its module."""
    for entry in recipes.RECIPE_ENTRIES:
        module = entry.target.split(".", 1)[0]
        (src,) = ROOT.glob(f"recipes/*/src/{module}")
        test = src.parents[1] / "tests" / "test_config_audit.py"
        assert test.is_file(), f"{entry.name}: no {test.relative_to(ROOT)}"
        assert f'"{entry.name}"' in test.read_text(), f"{entry.name} is not audited by {test.relative_to(ROOT)}"
