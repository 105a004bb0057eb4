"""The check's Python environment on a machine without our packages installed (the GPU machine).

1. the carried wheels (``.gpu_wheels/``, see ``fetch.py``) are installed with pip into a fresh target
   folder (``--no-index --no-deps``: the machine reaches no registry);
2. our packages run from the working tree: their ``src/`` folders go on ``PYTHONPATH`` (no editable
   install), and a minimal ``<name>-<version>.dist-info`` per package is written into the target folder
   with the ``entry_points.txt`` its ``pyproject.toml`` declares, because core finds verl-workers and
   verl-rewards through the ``verl.plugins`` entry-point group, which only installed metadata provides.

Every section then runs in a subprocess with :func:`section_env`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: the workspace packages the check imports (directories under the repository root)
MEMBERS = ("packages/verl-core", "packages/verl-workers", "packages/verl-rewards")


def install_wheels(wheel_dir: Path, site: Path, python: str = sys.executable) -> dict:
    """Install every ``*.whl`` of ``wheel_dir`` into a fresh ``site`` with pip; returns what it did."""
    if site.exists():
        shutil.rmtree(site)
    site.mkdir(parents=True)
    wheels = sorted(wheel_dir.glob("*.whl")) if wheel_dir.is_dir() else []
    t0 = time.perf_counter()
    if wheels:
        cmd = [python, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
               "--no-cache-dir", "--disable-pip-version-check", "--target", str(site), *map(str, wheels)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode:
            raise RuntimeError(f"pip install of {wheel_dir} failed:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    record = {"wheel_dir": str(wheel_dir), "wheels": [w.name for w in wheels], "site": str(site),
              "seconds": round(time.perf_counter() - t0, 2)}
    manifest = wheel_dir / "MANIFEST.json"
    if not wheels:
        record["note"] = (f"no wheels in {wheel_dir}: on the GPU machine run scripts/fetch_gpu_wheels first (here) and "
                          "name .gpu_wheels in the device call's carry")
    elif manifest.exists():
        listed = sorted(w["file"] for w in json.loads(manifest.read_text())["wheels"])
        if listed != record["wheels"]:
            record["note"] = f"{wheel_dir} holds {record['wheels']}, its MANIFEST.json lists {listed}: fetch again"
    return record


def write_dist_info(member: Path, site: Path) -> Path:
    """``site/<name>-<version>.dist-info`` for the workspace package in ``member`` (name, version, entry points)."""
    project = tomllib.loads((member / "pyproject.toml").read_text())["project"]
    name, version = project["name"], project["version"]
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "INSTALLER").write_text("scripts/gpu_check (source tree on PYTHONPATH)\n")
    lines = []
    for group, entries in project.get("entry-points", {}).items():
        lines.append(f"[{group}]")
        lines += [f"{key} = {value}" for key, value in entries.items()]
        lines.append("")
    (info / "entry_points.txt").write_text("\n".join(lines))
    return info


def setup(wheel_dir: Path, site: Path, python: str = sys.executable) -> dict:
    """Install the wheels and write our packages' metadata into ``site``; returns the record for the report."""
    record = install_wheels(wheel_dir, site, python)
    record["dist_info"] = [write_dist_info(ROOT / m, site).name for m in MEMBERS]
    record["pythonpath"] = python_path(site)
    return record


def python_path(site: Path) -> list[str]:
    """Our ``src/`` folders first (``verl`` extends its ``__path__`` over every one), then the wheels."""
    return [str(ROOT / m / "src") for m in MEMBERS] + [str(site)]


def section_env(site: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment every section subprocess runs in."""
    env = dict(os.environ)
    paths = python_path(site) + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env
