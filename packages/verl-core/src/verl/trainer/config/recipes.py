"""What every recipe's entry point needs to find its configs and fall back to its CPU default."""

from __future__ import annotations

from pathlib import Path


def recipe_configs_dir(module_file: str) -> Path:
    """A recipe's ``configs``: next to the module inside a wheel, ``recipes/<name>/configs`` in the repo
    (``module_file`` is the recipe module's ``__file__``, in ``recipes/<name>/src/<package>/``)."""
    here = Path(module_file).resolve().parent
    for candidate in (here / "configs", here.parents[1] / "configs"):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"no configs directory next to {here} nor in {here.parents[1]}")


def with_default_config(argv: list[str], default: Path) -> list[str]:
    """Prepend ``--config <default>`` unless the command line names a config file."""
    if any(a == "--config" or a.startswith("--config=") for a in argv):
        return list(argv)
    return ["--config", str(default), *argv]
