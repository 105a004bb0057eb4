"""A recipe's entry point in one declaration: what every recipe's ``main`` used to do, done once here.

    RECIPE = Recipe("dapo", __file__, built_in=cpu_assets.built_in, summary=("dynamic_sampling/all_*/mean",))
    # pyproject.toml:  [project.scripts]  verl-dapo = "verl_recipe_dapo.main_dapo:RECIPE.main"

``RECIPE.main()`` / ``RECIPE.train(argv)``:

1. the environment (Ray workers reuse the driver's interpreter under ``uv run``) and the recipe's
   plugins (registrations in the driver);
2. the config: core's defaults < the recipe's CPU default (``configs/<cpu_configs>``, unless the command
   line names ``--config``) < ``key=value``, over the recipe's schema (``load``), checked by core's
   validation plus the recipe's own (``validate``; `validate_with`) before anything is built;
3. the CPU default's built-in assets (``built_in``: task files, a warm-started tiny model, a local service)
   for the keys the config leaves unset, then validation again;
4. Ray (started by ``ray_init`` before the assets when the recipe has its own settings, else by core),
   the role -> worker mapping (``roles``), the resource pools (core's, with the reward model's own pool;
   ``pools`` for a recipe with pools of its own), the trainer class, training (``main_ppo.run_ppo``);
5. the summary: core's list of outputs, then the metrics named by ``summary`` (``fnmatch`` patterns).

``RECIPE.main`` is the console script: core's command line (`verl.trainer.config.cli.run_cli`) around
``train``: ``--help`` / ``--help-all`` over the recipe's ``schema``, ``--cfg job`` (the CPU default's resolved
config, no assets made), and a config error as its problems with exit status 2.
"""

from __future__ import annotations

import fnmatch
import importlib
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from verl.trainer.config import ConfigError, load_config, validate_config
from verl.trainer.config.recipes import load_with_built_in, recipe_configs_dir
from verl.trainer.recipe_assets import BuiltIn, assets_root
from verl.utils.ray_start import reuse_driver_env_for_workers

__all__ = ["BuiltIn", "Recipe", "validate_with"]

#: The keys a CPU default leaves unset for its built-in assets to fill.
DATA_AND_MODEL = ("data.train_files", "actor_rollout_ref.model.path")


def validate_with(checks: Callable[[DictConfig], list[str]]) -> Callable[[DictConfig], None]:
    """Core's validation plus a recipe's ``checks(cfg) -> [problem, ...]``, reported as one `ConfigError`
    (core's problems first); afterwards the config is read-only."""

    def validate(cfg: DictConfig) -> None:
        problems = list(checks(cfg))
        try:
            validate_config(cfg)
        except ConfigError as e:
            problems = list(e.problems) + problems
        if problems:
            raise ConfigError(problems)

    return validate


@dataclass(frozen=True)
class Recipe:
    """A recipe's entry point (see the module doc).

    Args:
        name: the recipe's name (the summary line; the CPU default is ``configs/<name>_cpu.yaml``).
        module_file: ``__file__`` of a module of the recipe's package: its ``configs/`` is found from it.
        cpu_configs: the config files (in ``configs/``) used when the command line names no ``--config``
            (default: ``<name>_cpu.yaml``).
        load: ``argv -> config`` (default: core's ``load_config``); a recipe with keys of its own passes
            ``functools.partial(load_config, schema=MyConfig)`` or a loader that derives keys.
        validate: ``config -> None``, raising ``ConfigError`` (default: core's; `validate_with` adds checks).
        built_in: ``(config, BuiltIn) -> ["key=value", ...]``: makes what the config leaves unset among
            ``made`` (the CPU default's data, model, services) and returns the overrides pointing at it.
        made: the keys ``built_in`` fills when unset (or ``config -> keys``).
        absolute_paths: keys whose relative file paths are made absolute (Ray workers open them elsewhere).
        plugins: modules the driver imports first (registrations the driver itself looks up).
        trainer_cls: the trainer class, or ``"module:Class"`` (imported at run time); default core's.
        roles: ``(config, core's {Role: worker class}) -> mapping``.
        pools: ``(config, mapping) -> ResourcePoolManager``; default core's (shared pool, reward model's own).
        ray_init: ``config -> ray.init kwargs``: start Ray with these before the assets are built.
        summary: ``fnmatch`` patterns of the metrics printed when training ends.
        schema: the config's root dataclass, for ``--help`` (default: core's ``PPOTrainerConfig``); a
            recipe with keys of its own names the schema its ``load`` reads.
        about: the command's description for ``--help`` (the recipe's main module's ``__doc__``).
        prog: the command's name (default ``verl-<name>``, underscores as dashes).
    """

    name: str
    module_file: str
    cpu_configs: tuple[str, ...] = ()
    load: Callable[[list[str]], DictConfig] = load_config
    validate: Callable[[DictConfig], None] = validate_config
    built_in: Callable[[DictConfig, BuiltIn], list[str]] | None = None
    made: Sequence[str] | Callable[[DictConfig], Sequence[str]] = DATA_AND_MODEL
    absolute_paths: tuple[str, ...] = ()
    plugins: tuple[str, ...] = ()
    trainer_cls: type | str | None = None
    roles: Callable[[DictConfig, dict], dict] | None = None
    pools: Callable[[DictConfig, dict], Any] | None = None
    ray_init: Callable[[DictConfig], dict[str, Any]] | None = None
    summary: tuple[str, ...] = ()
    schema: type | None = None
    about: str = ""
    prog: str | None = None

    # ------------------------------------------------------------------------------------- config
    @property
    def configs_dir(self) -> Path:
        """``configs/``: inside the package in a wheel, ``recipes/<name>/configs`` in the repository."""
        return recipe_configs_dir(self.module_file)

    def with_default_config(self, argv: list[str]) -> list[str]:
        """``argv`` with ``--config`` for each CPU default file, unless it names a config file itself."""
        if any(a == "--config" or a.startswith("--config=") for a in argv):
            return list(argv)
        names = self.cpu_configs or (f"{self.name}_cpu.yaml",)
        files = [arg for name in names for arg in ("--config", str(self.configs_dir / name))]
        return [*files, *argv]

    def load_file(self, *names: str, overrides: Sequence[str] = ()) -> DictConfig:
        """The config of ``configs/<name>`` files (later ones win) and ``overrides``, through the recipe's
        ``load``: as the files give it, neither validated nor completed by the built-in assets."""
        files = [arg for name in names for arg in ("--config", str(self.configs_dir / name))]
        return self.load([*files, *overrides])

    def load_config(self, argv: list[str], stack: ExitStack | None = None, built_in: bool = True) -> DictConfig:
        """The validated, read-only config of ``argv`` (module doc, step 2 and 3). ``built_in=False``: no
        assets are made (the config is validated as given). Services a built-in starts live on ``stack``."""
        argv = self.with_default_config(list(argv))
        if not built_in or self.built_in is None:
            cfg = self.load(argv)
            self.validate(cfg)
            return cfg
        stack = stack if stack is not None else ExitStack()

        def overrides(cfg: DictConfig, unset: list[str]) -> list[str]:
            self._start_ray(cfg)
            extra = list(self.built_in(cfg, BuiltIn(unset=unset, stack=stack, root=assets_root(cfg))))
            for key in self.absolute_paths:
                value = OmegaConf.select(cfg, key)
                if value and not Path(value).is_absolute() and Path(value).is_file():
                    extra.append(f"{key}={Path(value).resolve()}")
            return extra

        return load_with_built_in(argv, self.load, self.validate, self.made, overrides)

    # --------------------------------------------------------------------------------------- run
    def run(self, cfg: DictConfig) -> dict[str, float]:
        """Train with a validated config through core's ``run_ppo``; returns the last step's metrics."""
        from verl.trainer.main_ppo import run_ppo

        reuse_driver_env_for_workers()
        self._import_plugins()
        self._start_ray(cfg)
        return run_ppo(cfg, **self.trainer_kwargs(cfg))

    def trainer_kwargs(self, cfg: DictConfig) -> dict[str, Any]:
        """What ``main_ppo.build_trainer`` / ``run_ppo`` get for this recipe: its trainer class, roles and
        pools (a test or benchmark builds the recipe's trainer with them, and its own overrides)."""
        from verl.trainer.main_ppo import build_role_worker_mapping

        kwargs: dict[str, Any] = {}
        if self.trainer_cls is not None:
            kwargs["trainer_cls"] = _resolve(self.trainer_cls)
        if self.roles is not None:
            kwargs["role_worker_mapping"] = self.roles(cfg, build_role_worker_mapping(cfg))
        if self.pools is not None:
            kwargs["pool_builder"] = self.pools
        return kwargs

    def train(self, argv: list[str]) -> dict[str, float]:
        """Load (with the built-in assets) and train; services the assets started stop afterwards."""
        reuse_driver_env_for_workers()
        self._import_plugins()
        with ExitStack() as stack:
            return self.run(self.load_config(argv, stack))

    def main(self, argv: list[str] | None = None) -> None:
        """The console script ``verl-<name>``: ``--help``, ``--cfg job``, training; a config error prints its
        problems and exits with status 2 (returns None: a returned value would become the exit status)."""
        from verl.trainer.config import PPOTrainerConfig
        from verl.trainer.config.cli import run_cli

        run_cli(
            argv, prog=self.command, schema=self.schema or PPOTrainerConfig, main=self._train_and_summarize,
            load=lambda args: self.load(self.with_default_config(args)), about=self.about,
        )  # fmt: skip

    @property
    def command(self) -> str:
        return self.prog or f"verl-{self.name.replace('_', '-')}"

    def _train_and_summarize(self, argv: list[str]) -> None:
        metrics = self.train(argv)
        print(self.summary_line(metrics), flush=True)

    def summary_line(self, metrics: dict[str, float]) -> str:
        shown = {
            k: round(float(v), 4) for k, v in metrics.items() if any(fnmatch.fnmatchcase(k, p) for p in self.summary)
        }
        return f"{self.name} finished at step {metrics.get('training/global_step')}: {shown}"

    # ---------------------------------------------------------------------------------- helpers
    def _import_plugins(self) -> None:
        for module in self.plugins:
            importlib.import_module(module)

    def _start_ray(self, cfg: DictConfig) -> None:
        if self.ray_init is None or cfg.trainer.worker_backend == "local":
            return
        import ray

        from verl.utils.ray_start import init_ray

        if not ray.is_initialized():
            init_ray(**self.ray_init(cfg))


def _resolve(target: type | str) -> type:
    if not isinstance(target, str):
        return target
    module, _, attr = target.partition(":")
    if not attr:
        raise ValueError(f"trainer_cls={target!r}: expected 'package.module:ClassName'")
    return getattr(importlib.import_module(module), attr)
