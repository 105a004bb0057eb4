"""scripts/new_recipe.py: the generated recipe is a package whose own smoke test passes."""

import os
import re
import shutil
import subprocess
import sys
import tomllib

import pytest

from .by_path import ROOT, load_module

nr = load_module(ROOT / "scripts" / "new_recipe.py", "new_recipe")


@pytest.mark.slow  # a pytest subprocess that imports torch and builds a tiny model
def test_generated_recipe_passes_its_own_smoke_test(tmp_path):
    root = nr.create("my-paper", tmp_path, title="My Paper")
    meta = tomllib.loads((root / "pyproject.toml").read_text())
    assert meta["project"]["name"] == "verl-recipe-my-paper"
    assert meta["project"]["scripts"] == {"verl-my-paper": "verl_recipe_my_paper.main:RECIPE.main"}
    assert {re.match(r"[a-z-]+", d).group(0) for d in meta["project"]["dependencies"]} == {
        "verl-core",
        "verl-workers",
        "verl-rewards",
        "omegaconf",
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


def test_wiring_adds_the_recipe_to_every_workspace_list(tmp_path):
    """The root pyproject gains the source, the dev-group entry and the import-linter entries."""
    text = (ROOT / "pyproject.toml").read_text()
    (tmp_path / "pyproject.toml").write_text(text)
    n = nr.names("my-paper")
    nr.wire(n, tmp_path)
    nr.wire(n, tmp_path)  # a second time changes nothing
    after = tomllib.loads((tmp_path / "pyproject.toml").read_text())
    assert after["tool"]["uv"]["sources"]["verl-recipe-my-paper"] == {"workspace": True}
    assert "verl-recipe-my-paper" in after["dependency-groups"]["dev"]
    il = after["tool"]["importlinter"]
    assert "verl_recipe_my_paper" in il["root_packages"]
    lists = {c["id"]: c.get("forbidden_modules", c.get("ancestors", [])) for c in il["contracts"]}
    assert "verl_recipe_my_paper" in lists["recipes-on-top"] and "verl_recipe_my_paper" in lists["no-cycles"]
    before = tomllib.loads(text)
    assert len(after["dependency-groups"]["dev"]) == len(before["dependency-groups"]["dev"]) + 1


@pytest.mark.slow  # copies the workspace, locks it, and runs the new recipe's tests in its own environment
@pytest.mark.skipif(shutil.which("uv") is None, reason="uv is not on PATH")
def test_scaffolded_workspace_runs_the_new_recipes_tests_with_the_readme_commands(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    keep = shutil.ignore_patterns(".venv", ".venvs", "__pycache__", "site", "outputs", ".git", "*.pyc")
    for item in ("pyproject.toml", "uv.lock", "conftest.py", "packages", "recipes", "scripts"):
        src = ROOT / item
        (shutil.copytree(src, ws / item, ignore=keep) if src.is_dir() else shutil.copy2(src, ws / item))
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "UV_PROJECT_ENVIRONMENT")}
    env["UV_PROJECT_ENVIRONMENT"] = str(tmp_path / "env")

    def run(*cmd):
        out = subprocess.run(cmd, cwd=ws, env=env, capture_output=True, text=True, timeout=900)
        assert out.returncode == 0, f"{cmd}: {out.stdout[-3000:]}{out.stderr[-3000:]}"
        return out.stdout

    run(sys.executable, "scripts/new_recipe.py", "my-paper", "--title", "My Paper")
    assert "verl-recipe-my-paper" in (ws / "uv.lock").read_text()
    out = run("uv", "run", "--frozen", "--exact", "--package", "verl-recipe-my-paper", "pytest",
              "recipes/my-paper/tests", "-q", "-p", "no:cacheprovider")
    n_tests = sum(f.read_text().count("\ndef test_") for f in (ws / "recipes/my-paper/tests").glob("test_*.py"))
    assert n_tests >= 2 and f"{n_tests} passed" in out, out
