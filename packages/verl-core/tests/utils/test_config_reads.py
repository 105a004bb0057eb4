"""What the config audit counts as a read (verl.utils.config_reads), checked on a real trainer config."""

import os
import pickle
import subprocess
import sys

import pytest
from omegaconf import OmegaConf
from verl.trainer.config import load_config
from verl.utils import config_reads

REQUIRED = ["data.train_files=train.parquet", "actor_rollout_ref.model.path=/models/tiny"]


@pytest.fixture
def recorder():
    config_reads.install()
    config_reads.clear()
    yield config_reads
    config_reads.uninstall()
    config_reads.clear()


def _validated(*extra):
    cfg = load_config([*REQUIRED, *extra])
    OmegaConf.set_readonly(cfg, True)  # what validate_config does last
    return cfg


def test_value_reads_in_every_form_count_under_the_full_key(recorder):
    cfg = _validated("+reward.reward_kwargs.alpha=1")
    actor = cfg.actor_rollout_ref.actor
    assert actor.ppo_epochs == 1  # attribute
    assert actor["clip_ratio"] == 0.2  # item
    assert actor.optim.get("lr") == 1e-6  # get
    assert "shuffle" in actor  # a membership test consults the key
    assert dict(cfg.reward.reward_kwargs) == {"alpha": 1}  # dict() reads every child
    assert OmegaConf.select(cfg, "trainer.seed") == 1
    assert recorder.reads() == {
        "actor_rollout_ref.actor.ppo_epochs",
        "actor_rollout_ref.actor.clip_ratio",
        "actor_rollout_ref.actor.optim.lr",
        "actor_rollout_ref.actor.shuffle",
        "reward.reward_kwargs.alpha",
        "trainer.seed",
    }


def test_navigating_and_listing_keys_read_nothing(recorder):
    cfg = _validated()
    section = cfg.actor_rollout_ref.actor.optim
    assert "lr" in list(section.keys()) and sorted(section)[0] == "betas"
    assert recorder.reads() == set()


def test_a_list_is_one_value(recorder):
    cfg = _validated()
    assert list(cfg.trainer.logger) == ["console"]
    assert recorder.reads() == {"trainer.logger"}


def test_converting_a_section_reads_its_leaves_but_the_whole_config_is_a_record(recorder):
    cfg = _validated("+ray_kwargs.ray_init.runtime_env.env_vars.X=1")
    OmegaConf.to_yaml(cfg)  # config.yaml, the trackers' hyper-parameters: not a use
    OmegaConf.to_container(cfg, resolve=True)
    assert recorder.reads() == set()
    OmegaConf.to_container(cfg.ray_kwargs.ray_init, resolve=True)  # passed on whole to ray.init
    assert recorder.reads() == {"ray_kwargs.ray_init.num_cpus", "ray_kwargs.ray_init.runtime_env.env_vars.X"}


def test_a_copied_section_is_passed_on_whole(recorder):
    cfg = _validated()
    merged = OmegaConf.merge({"extra": 1}, cfg.critic.checkpoint)  # what reads the copy is not recorded
    assert merged.extra == 1 and recorder.reads() == {"critic.checkpoint.save_contents", "critic.checkpoint.load_contents"}
    OmegaConf.create({"a": 1})
    assert len(recorder.reads()) == 2


def test_only_reads_after_validation_count(recorder):
    cfg = load_config(REQUIRED)  # loaded, not yet validated: what validation reads is not a use
    assert cfg.trainer.seed == 1 and "lr" in cfg.actor_rollout_ref.actor.optim
    assert recorder.reads() == set()


def test_a_pickled_section_keeps_its_full_keys(recorder):
    cfg = _validated()
    copy = pickle.loads(pickle.dumps(cfg.actor_rollout_ref))  # what a Ray worker receives
    assert copy.rollout.n == 5
    assert recorder.reads() == {"actor_rollout_ref.rollout.n"}


def test_uninstall_restores_omegaconf():
    config_reads.install()
    config_reads.uninstall()
    cfg = _validated()
    assert cfg.trainer.seed == 1 and config_reads.reads() == set()


def test_another_process_reports_through_its_file(tmp_path):
    """A worker process records with `worker_setup` (Ray's worker_process_setup_hook) and reports each new
    key to <dir>/reads-<pid>.txt as it reads it; `collect` gathers them."""
    script = (
        "import pickle, sys\n"
        "from verl.utils import config_reads\n"
        "config_reads.worker_setup()\n"
        "cfg = pickle.load(sys.stdin.buffer)\n"
        "print(cfg.optim.lr, cfg.optim.lr, cfg.ppo_epochs)\n"
    )
    cfg = _validated()
    env = {**os.environ, config_reads.ENV: str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", script], input=pickle.dumps(cfg.actor_rollout_ref.actor),
                         capture_output=True, env=env, check=True)  # fmt: skip
    assert out.stdout.split() == [b"1e-06", b"1e-06", b"1"]
    files = list(tmp_path.glob("reads-*.txt"))
    assert len(files) == 1 and files[0].read_text().splitlines() == [
        "actor_rollout_ref.actor.optim.lr",
        "actor_rollout_ref.actor.ppo_epochs",
    ]
    assert config_reads.collect(tmp_path) == {"actor_rollout_ref.actor.optim.lr", "actor_rollout_ref.actor.ppo_epochs"}


def test_ray_init_overrides_go_through_the_config():
    cfg = load_config([*REQUIRED, *config_reads.ray_init_overrides("/tmp/reads")])
    env = cfg.ray_kwargs.ray_init.runtime_env
    assert env.worker_process_setup_hook == "verl.utils.config_reads.worker_setup"
    assert env.env_vars[config_reads.ENV] == "/tmp/reads"
