"""Hydra's own ``hydra.*`` overrides on an upstream command line: the run directory, read; the rest, refused.

Upstream's ``main_ppo`` is a ``@hydra.main(version_base=None)`` app, so its command lines may carry Hydra's
settings next to the training keys. This loader is not Hydra; it reads the ones with a meaning here:

- ``hydra.run.dir=DIR``: the run's output directory. ``main_ppo`` writes ``DIR/.hydra/config.yaml`` (the
  loaded config) and ``DIR/.hydra/overrides.yaml`` (the command line) there, as Hydra does. ``${now:FMT}``
  in it is Hydra's clock resolver (``outputs/${now:%Y-%m-%d}/${now:%H-%M-%S}``, upstream's default).
  Unset: nothing is written outside ``trainer.default_local_dir`` (which holds ``config.yaml`` anyway).
- ``hydra.output_subdir=NAME``: the subdirectory for those files (default ``.hydra``; ``null``: none).
- ``hydra.job.chdir=false``: Hydra's default under ``version_base=None``; accepted. ``true`` is refused:
  the driver does not change directory, because Ray's workers would not follow it and relative paths
  would then split between two directories.

Any other ``hydra.*`` key, or a Hydra config group (``hydra/job_logging=disabled``), is refused by name.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass

import yaml

SUPPORTED = ("hydra.run.dir", "hydra.output_subdir", "hydra.job.chdir")
_NOW = re.compile(r"\$\{now:([^}]*)\}")
_REFUSED_WHY = (
    "this loader is not Hydra; of Hydra's own settings it reads hydra.run.dir, hydra.output_subdir and "
    "hydra.job.chdir=false (logging goes to stdout and trainer.logger; there are no sweeps or launchers)"
)


@dataclass(frozen=True)
class HydraRun:
    """What the command line asked of Hydra's run directory (``dir`` None: not asked)."""

    dir: str | None = None
    output_subdir: str | None = ".hydra"
    overrides: tuple[str, ...] = ()


def is_hydra_arg(arg: str) -> bool:
    key = arg.lstrip("+~").split("=", 1)[0]
    return key == "hydra" or key.startswith(("hydra.", "hydra/"))


def split_hydra(argv: list[str]) -> tuple[list[str], HydraRun, list[str]]:
    """(the arguments that are not Hydra's, the run-directory settings, problems naming refused ones)."""
    rest, problems = [], []
    values: dict[str, str | None] = {}
    for arg in argv:
        if not is_hydra_arg(arg):
            rest.append(arg)
            continue
        key, eq, raw = arg.lstrip("+").partition("=")
        if key not in SUPPORTED or arg.startswith("~") or not eq:
            problems.append(f"{arg}: Hydra's {key} is not supported; {_REFUSED_WHY}")
            continue
        value = yaml.safe_load(raw) if raw else None
        if key == "hydra.job.chdir":
            if value is True:
                problems.append(
                    f"{arg}: the driver does not change directory (Ray's workers would not follow it, so "
                    "relative paths would split between two directories); leave hydra.job.chdir=false (Hydra's "
                    "default) and give absolute paths, e.g. trainer.default_local_dir=<run dir>/checkpoints"
                )
            elif value is not False:
                problems.append(f"{arg}: hydra.job.chdir takes true or false")
            continue
        values[key] = None if value is None else str(raw).strip("'\"")
    run = HydraRun(
        dir=values.get("hydra.run.dir"),
        output_subdir=values.get("hydra.output_subdir", ".hydra"),
        overrides=tuple(rest),
    )
    return rest, run, problems


def expand_now(text: str, now: float | None = None) -> str:
    """Hydra's ``${now:FMT}`` resolver (``time.strftime`` of the launch time)."""
    t = time.localtime(now)
    return _NOW.sub(lambda m: time.strftime(m.group(1), t), text)


def write_run_dir(run: HydraRun, config_yaml: str, now: float | None = None) -> str | None:
    """Write Hydra's record of the run (``config.yaml``, ``overrides.yaml`` under ``output_subdir``) into
    ``run.dir``; returns the directory written, None when no run directory was asked for."""
    if run.dir is None:
        return None
    run_dir = expand_now(run.dir, now)
    os.makedirs(run_dir, exist_ok=True)
    if run.output_subdir is None:
        return run_dir
    sub = os.path.join(run_dir, run.output_subdir)
    os.makedirs(sub, exist_ok=True)
    with open(os.path.join(sub, "config.yaml"), "w") as f:
        f.write(config_yaml)
    with open(os.path.join(sub, "overrides.yaml"), "w") as f:
        yaml.safe_dump(list(run.overrides), f, default_flow_style=False)
    return run_dir
