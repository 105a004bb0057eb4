"""The packages as users install them: wheels built by `uv build --all-packages`, installed from the
wheel folder into fresh virtual environments outside the workspace.

verl-core alone (DESIGN rule 2): the wheel works on its own (`from verl import DataProto`), `import verl`
stays cheap (no Ray, no transformers) and its dependency closure holds none of the heavy engines.
A recipe with the packages it needs (verl-core, verl-workers, verl-rewards, verl-recipe-dapo): its
console script runs its CPU default there (shortened to two steps), which also checks that `verl.workers`
and `verl.rewards` extend core's `verl` from separate wheels and that their plugins register.
"""

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
FORBIDDEN = ("transformers", "vllm", "sglang", "megatron", "flash-attn", "flash_attn", "peft")

CHECK_IMPORTS = """
import sys
import verl
assert verl.__file__.startswith(sys.prefix), verl.__file__  # the installed wheel, not the workspace
loaded = sorted(m for m in ("ray", "transformers", "torch") if m in sys.modules)
assert "ray" not in loaded and "transformers" not in loaded, f"import verl loaded {loaded}"
from verl import DataProto
import torch
import verl.single_controller.base.decorator
assert "ray" not in sys.modules, "verl.single_controller.base imported ray"
assert "transformers" not in sys.modules
d = DataProto.from_dict(tensors={"x": torch.arange(6).view(3, 2)})
assert [len(c) for c in d.chunk(3)] == [1, 1, 1]
print("ok", verl.__version__)
"""


def _run(*cmd: str, cwd: Path) -> str:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("VIRTUAL_ENV", "PYTHONPATH", "UV_PROJECT_ENVIRONMENT")
    }
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise AssertionError(
            f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        )
    return proc.stdout


@pytest.fixture(scope="module")
def uv() -> str:
    path = shutil.which("uv")
    if path is None:
        pytest.skip("uv is not on PATH")
    return path


@pytest.fixture(scope="module")
def wheels(uv, tmp_path_factory) -> Path:
    """Every distribution of the workspace, built as the README says (`uv build --all-packages`)."""
    dist = tmp_path_factory.mktemp("dist")
    _run(uv, "build", "--all-packages", "--wheel", "-o", str(dist), cwd=ROOT)
    return dist


def _wheel(dist: Path, name: str) -> str:
    (wheel,) = dist.glob(f"{name.replace('-', '_')}-*.whl")
    return str(wheel)


def _fresh_venv(uv: str, tmp_path: Path, package: str, wheels: list[str]) -> str:
    """A new venv outside the workspace with ``wheels`` installed; third-party versions are pinned to the
    workspace lock (``package``'s closure) so the install comes from uv's cache."""
    constraints = tmp_path / "constraints.txt"
    _run(
        uv,
        "export",
        "--frozen",
        "--package",
        package,
        "--no-dev",
        "--no-hashes",
        "--no-emit-workspace",
        "--no-header",
        "-o",
        str(constraints),
        cwd=ROOT,
    )
    venv = tmp_path / "v"
    _run(uv, "venv", str(venv), "--python", "3.11", cwd=tmp_path)
    python = str(venv / "bin" / "python")
    _run(uv, "pip", "install", "--python", python, "-c", str(constraints), *wheels, cwd=tmp_path)
    return python


def test_every_distribution_builds(wheels):
    members = [p for pattern in ("packages/*", "recipes/*") for p in ROOT.glob(pattern) if (p / "pyproject.toml").is_file()]
    built = sorted(w.name.split("-")[0] for w in wheels.glob("*.whl"))
    assert len(built) == len(members), built
    for name in ("verl_core", "verl_workers", "verl_rewards", "verl_agent", "verl_recipe_dapo"):
        assert name in built


def test_core_wheel_installs_alone_and_imports_lightly(uv, wheels, tmp_path):
    python = _fresh_venv(uv, tmp_path, "verl-core", [_wheel(wheels, "verl-core")])

    installed = json.loads(_run(uv, "pip", "list", "--python", python, "--format", "json", cwd=tmp_path))
    names = {re.sub(r"[-_.]+", "-", p["name"].lower()) for p in installed}
    assert "verl-core" in names and "torch" in names
    heavy = sorted(
        n
        for n in names
        if any(n == f or n.startswith(f + "-") for f in (x.replace("_", "-") for x in FORBIDDEN))
    )
    assert heavy == [], f"verl-core's dependency closure pulls in {heavy}"

    out = _run(python, "-c", CHECK_IMPORTS, cwd=tmp_path)
    assert out.strip().startswith("ok ")


RECIPE_RUN = """
import sys
import verl, verl.workers, verl.rewards, verl_recipe_dapo
for mod in (verl, verl.workers, verl.rewards, verl_recipe_dapo):
    assert mod.__file__.startswith(sys.prefix), mod.__file__  # the installed wheels, not the workspace
print("ok")
"""


@pytest.mark.e2e
def test_recipe_wheel_runs_its_cpu_default_outside_the_workspace(uv, wheels, tmp_path):
    names = ("verl-core", "verl-workers", "verl-rewards", "verl-recipe-dapo")
    python = _fresh_venv(uv, tmp_path, "verl-recipe-dapo", [_wheel(wheels, n) for n in names])
    assert _run(python, "-c", RECIPE_RUN, cwd=tmp_path).strip().endswith("ok")
    out = tmp_path / "run"
    script = str(Path(python).parent / "verl-dapo")
    stdout = _run(
        script,
        "trainer.total_training_steps=2",
        f"trainer.default_local_dir={out}",
        "trainer.test_freq=2",
        "algorithm.filter_groups.max_num_gen_batches=0",
        cwd=tmp_path,
    )
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "train/num_gen_batches" in r] == [1, 2], stdout[-2000:]
    assert (out / "reward_curve.png").is_file()
