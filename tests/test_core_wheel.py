"""verl-core as users install it: built wheel, fresh venv outside the workspace (DESIGN rule 2).

Checks that the wheel works on its own (`from verl import DataProto`), that `import verl` stays
cheap (no Ray, no transformers) and that its dependency closure holds none of the heavy engines.
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


def test_core_wheel_installs_alone_and_imports_lightly(tmp_path):
    uv = shutil.which("uv")
    if uv is None:
        pytest.skip("uv is not on PATH")
    dist = tmp_path / "dist"
    _run(uv, "build", "--package", "verl-core", "--wheel", "-o", str(dist), cwd=ROOT)
    (wheel,) = dist.glob("verl_core-*.whl")

    # Pin third-party versions to the workspace lock so the install comes from uv's cache.
    constraints = tmp_path / "constraints.txt"
    _run(
        uv,
        "export",
        "--frozen",
        "--package",
        "verl-core",
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
    _run(uv, "pip", "install", "--python", python, "-c", str(constraints), str(wheel), cwd=tmp_path)

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
