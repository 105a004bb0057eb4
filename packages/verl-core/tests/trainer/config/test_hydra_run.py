"""Hydra's own hydra.* overrides: the run directory is read and written as Hydra writes it; the rest refused."""

import time

import pytest
import yaml
from verl.trainer.config import ConfigError, load_config
from verl.trainer.config.hydra_run import expand_now, split_hydra, write_run_dir

REQUIRED = ["data.train_files=train.parquet", "actor_rollout_ref.model.path=/models/tiny"]


def test_run_dir_is_read_and_written(tmp_path):
    argv = [
        *REQUIRED,
        f"hydra.run.dir={tmp_path}/outputs/${{now:%Y}}",
        "hydra.job.chdir=False",
        "data.seed=3",
    ]
    cfg = load_config(argv)  # hydra.* does not reach the training config
    assert "hydra" not in cfg and cfg.data.seed == 3
    rest, run, problems = split_hydra(argv)
    assert problems == [] and rest == [*REQUIRED, "data.seed=3"]
    now = time.mktime((2031, 5, 6, 7, 8, 9, 0, 0, -1))
    written = write_run_dir(run, "data:\n  seed: 3\n", now=now)
    assert written == f"{tmp_path}/outputs/2031"
    assert (tmp_path / "outputs/2031/.hydra/config.yaml").read_text() == "data:\n  seed: 3\n"
    assert yaml.safe_load((tmp_path / "outputs/2031/.hydra/overrides.yaml").read_text()) == rest
    # output_subdir: another name, or null for none
    _, run, _ = split_hydra([f"hydra.run.dir={tmp_path}/b", "hydra.output_subdir=meta"])
    write_run_dir(run, "x: 1\n")
    assert (tmp_path / "b/meta/config.yaml").exists()
    _, run, _ = split_hydra([f"hydra.run.dir={tmp_path}/c", "hydra.output_subdir=null"])
    write_run_dir(run, "x: 1\n")
    assert (tmp_path / "c").is_dir() and list((tmp_path / "c").iterdir()) == []
    # no run directory asked: nothing written
    assert write_run_dir(split_hydra(REQUIRED)[1], "x: 1\n") is None


def test_expand_now_is_strftime_of_the_launch_time():
    now = time.mktime((2030, 1, 2, 3, 4, 5, 0, 0, -1))
    assert expand_now("outputs/${now:%Y-%m-%d}/${now:%H-%M-%S}", now) == "outputs/2030-01-02/03-04-05"


@pytest.mark.parametrize(
    "arg, says",
    [
        ("hydra.job.chdir=True", "the driver does not change directory"),
        ("hydra.verbose=true", "Hydra's hydra.verbose is not supported"),
        ("hydra/job_logging=disabled", "Hydra's hydra/job_logging is not supported"),
        ("hydra.sweep.dir=/x", "Hydra's hydra.sweep.dir is not supported"),
    ],
)
def test_other_hydra_settings_are_refused_by_name(arg, says):
    with pytest.raises(ConfigError) as ei:
        load_config([*REQUIRED, arg])
    assert any(p.startswith(f"{arg}: ") and says in p for p in ei.value.problems), ei.value.problems
