"""What every recipe's entry point needs to find its configs and fall back to its CPU default."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from omegaconf import DictConfig, OmegaConf


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


# Stands for a file the recipe will make, while a config is checked before making it (any non-empty
# value passes the "is it set" checks; nothing reads it).
BUILT_IN = "__built_in__"


def load_with_built_in(
    argv: list[str],
    load: Callable[[list[str]], DictConfig],
    validate: Callable[[DictConfig], object],
    made: Sequence[str] | Callable[[DictConfig], Sequence[str]],
    overrides: Callable[[DictConfig, list[str]], list[str]],
) -> DictConfig:
    """A recipe's config with its built-in CPU assets: ``load(argv)``; when any key in ``made`` is unset,
    (or ``made(cfg)``, when which keys the recipe makes depends on the config) first validate the config
    with those keys set to `BUILT_IN`, so every other problem is reported
    before minutes of making the task and the warm start; then ``overrides(cfg, unset)`` makes what is
    needed and returns the ``key=value`` overrides pointing at it; reload with them and validate."""
    cfg = load(argv)
    keys = made(cfg) if callable(made) else made
    unset = [key for key in keys if not OmegaConf.select(cfg, key)]
    if unset:
        validate(load([*argv, *(f"{key}={BUILT_IN}" for key in unset)]))
    # what the assets read of the config is as the run will have it (read-only, as validated configs are)
    OmegaConf.set_readonly(cfg, True)
    extra = overrides(cfg, unset)
    if extra:
        cfg = load([*argv, *extra])
    validate(cfg)
    return cfg
