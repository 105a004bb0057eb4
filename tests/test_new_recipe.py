"""scripts/new_recipe.py: the generated recipe is a package whose own smoke test passes."""

import importlib.util
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load():
    spec = importlib.util.spec_from_file_location("new_recipe", ROOT / "scripts" / "new_recipe.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["new_recipe"] = mod
    spec.loader.exec_module(mod)
    return mod


nr = _load()


@pytest.mark.slow  # a pytest subprocess that imports torch and builds a tiny model
def test_generated_recipe_passes_its_own_smoke_test(tmp_path):
    root = nr.create("my-paper", tmp_path, title="My Paper")
    meta = tomllib.loads((root / "pyproject.toml").read_text())
    assert meta["project"]["name"] == "verl-recipe-my-paper"
    assert meta["project"]["scripts"] == {"verl-my-paper": "verl_recipe_my_paper.main:RECIPE.main"}
    assert {d.split("[")[0] for d in meta["project"]["dependencies"]} == {
        "verl-core",
        "verl-workers",
        "verl-rewards",
    }
    assert all(v == {"workspace": True} for v in meta["tool"]["uv"]["sources"].values())
    readme = (root / "README.md").read_text()
    for bar in ("**Paper:**", "uv run --package verl-recipe-my-paper verl-my-paper", "Expected numbers"):
        assert bar in readme
    env = dict(os.environ, PYTHONPATH=str(root / "src"))
    # Run the generated tests on their own (their folder as rootdir, no repo conftest or settings).
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--rootdir",
            str(root),
            "-c",
            os.devnull,
            str(root / "tests"),
        ],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "3 passed" in out.stdout


@pytest.mark.slow
def test_generated_entry_point_loads_the_cpu_config(tmp_path):
    root = nr.create("abc", tmp_path)
    env = dict(os.environ, PYTHONPATH=str(root / "src"))
    from verl.utils.dataset import write_parquet
    from verl.utils.dataset.tasks import make_arithmetic_rows
    from verl.workers.tiny import build_tiny_qwen2

    train = write_parquet(make_arithmetic_rows(16, seed=0, digits=1), tmp_path / "train.parquet")
    build_tiny_qwen2(tmp_path / "model", size="xs")
    load = (
        "import sys; from verl_recipe_abc.main import RECIPE; cfg = RECIPE.load_config(sys.argv[1:]); "
        "print(f'config OK: {cfg.trainer.project_name}/{cfg.trainer.experiment_name}')"
    )
    out = subprocess.run(
        [sys.executable, "-c", load, f"data.train_files={train}", f"actor_rollout_ref.model.path={tmp_path / 'model'}"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "config OK: abc/cpu" in out.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "verl_recipe_abc.main", "trainer.total_training_stepz=3"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode != 0 and "total_training_steps" in bad.stderr  # core's did-you-mean


@pytest.mark.parametrize("bad", ["Dapo", "1x", "a b", "x--y", "-x", ""])
def test_bad_names_are_refused(bad, tmp_path):
    with pytest.raises(SystemExit, match="not valid"):
        nr.create(bad, tmp_path)


def test_existing_folder_is_not_touched(tmp_path):
    (tmp_path / "dapo").mkdir()
    (tmp_path / "dapo" / "keep.txt").write_text("mine")
    with pytest.raises(SystemExit, match="already exists"):
        nr.create("dapo", tmp_path)
    assert (tmp_path / "dapo" / "keep.txt").read_text() == "mine"


def test_names_are_derived_consistently():
    assert nr.names("one_two") == {
        "name": "one_two",
        "dist": "verl-recipe-one-two",
        "module": "verl_recipe_one_two",
        "cls": "OneTwo",
        "script": "verl-one-two",
        "stage": "one_two",
    }
