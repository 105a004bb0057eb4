"""Entry points: ``verl-fully-async`` (fully asynchronous) and ``verl-one-step-off`` (one-step-off).

    uv run --package verl-recipe-fully-async verl-fully-async [key=value ...]     # configs/fully_async_cpu.yaml
    uv run --package verl-recipe-fully-async verl-one-step-off [key=value ...]    # + configs/one_step_off_cpu.yaml
    uv run --package verl-recipe-fully-async verl-fully-async --config recipes/fully_async/configs/<file>.yaml ...

Config order (later wins): core's defaults and this recipe's schema < ``--config`` files (the CPU
default when none is given) < ``key=value``. When the config leaves the data or the model unset, the
built-in addition task and a warm-started tiny model are made first (``cpu_assets``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from verl.trainer.config.recipes import recipe_configs_dir
from verl.utils.ray_start import init_ray

from verl_recipe_fully_async.config import load_async_config, rollout_world_size, validate_async_config

CPU_CONFIG = "fully_async_cpu.yaml"
ONE_STEP_OFF_CONFIG = "one_step_off_cpu.yaml"
PAPER_CONFIG = "fully_async_qwen2.5_7b.yaml"


def configs_dir() -> Path:
    """The recipe's configs: inside the package in a wheel, ``recipes/fully_async/configs`` in the repo."""
    return recipe_configs_dir(__file__)


def with_default_config(argv: list[str], defaults: tuple[str, ...] = (CPU_CONFIG,)) -> list[str]:
    """Prepend ``--config`` for each default file unless the command line names a config file."""
    if any(a == "--config" or a.startswith("--config=") for a in argv):
        return list(argv)
    pre: list[str] = []
    for name in defaults:
        pre += ["--config", str(configs_dir() / name)]
    return [*pre, *argv]


def load_recipe_config(
    argv: list[str], defaults: tuple[str, ...] = (CPU_CONFIG,), assets: bool = True
) -> DictConfig:
    """Load (the CPU default when no ``--config``), make the CPU assets when the config leaves the model
    or data unset (``assets``), validate; the result is read-only."""
    argv = with_default_config(argv, defaults)
    cfg = load_async_config(argv)
    if assets:
        from verl_recipe_fully_async.cpu_assets import asset_overrides

        extra = asset_overrides(cfg)
        if extra:
            cfg = load_async_config([*argv, *extra])
    validate_async_config(cfg)
    return cfg


def ray_init_kwargs(cfg: DictConfig) -> dict[str, Any]:
    """Core's Ray settings, with one BLAS thread share per worker of *both* pools on CPU (core counts the
    trainer pool only); an ``OMP_NUM_THREADS`` in ``ray_kwargs.ray_init.runtime_env.env_vars`` wins."""
    from verl.trainer.config import resolve_device
    from verl.trainer.main_ppo import ray_init_kwargs as core_kwargs
    from verl.utils.cpu_threads import available_cpus

    kwargs = core_kwargs(cfg)
    user_env = OmegaConf.to_container(cfg.ray_kwargs.ray_init, resolve=True).get("runtime_env") or {}
    if resolve_device(cfg) == "cpu" and "OMP_NUM_THREADS" not in (user_env.get("env_vars") or {}):
        workers = int(cfg.trainer.nnodes) * int(cfg.trainer.n_gpus_per_node) + rollout_world_size(cfg)
        # core's count of this process's CPUs (affinity mask capped by the cgroup quota), not the host's
        kwargs["runtime_env"]["env_vars"]["OMP_NUM_THREADS"] = str(max(1, available_cpus() // workers))
    return kwargs


def build_role_worker_mapping(cfg: DictConfig) -> dict:
    """Core's roles with this recipe's worker for the actor, plus ``Role.Rollout`` for the rollout pool."""
    from verl.trainer.main_ppo import build_role_worker_mapping as core_mapping
    from verl.trainer.ppo.ray_trainer import Role

    from verl_recipe_fully_async.workers import AsyncActorRolloutWorker

    mapping = core_mapping(cfg)
    for role in (Role.ActorRollout, Role.ActorRolloutRef):
        if role in mapping:
            mapping[role] = AsyncActorRolloutWorker
    mapping[Role.Rollout] = AsyncActorRolloutWorker
    return mapping


def build_resource_pool_manager(cfg: DictConfig, mapping: dict):
    """Two pools: ``trainer_pool`` (trainer.nnodes x n_gpus_per_node) for every role but the rollout,
    ``rollout_pool`` (rollout.nnodes x rollout.n_gpus_per_node) for it. CPU workers get an equal share
    of the cluster's CPUs (fractional on a small machine)."""
    import ray
    from verl.trainer.config import resolve_device
    from verl.trainer.ppo.ray_trainer import ResourcePoolManager, Role

    t, r = cfg.trainer, cfg.rollout
    spec = {
        "trainer_pool": [int(t.n_gpus_per_node)] * int(t.nnodes),
        "rollout_pool": [int(r.n_gpus_per_node)] * int(r.nnodes),
    }
    use_gpu = resolve_device(cfg) == "cuda"
    cpus = 1.0
    if not use_gpu:
        workers = sum(sum(v) for v in spec.values())
        cpus = min(1.0, float(ray.cluster_resources().get("CPU", 1)) / workers)
    pools = {role: "rollout_pool" if role == Role.Rollout else "trainer_pool" for role in mapping}
    return ResourcePoolManager(spec, pools, use_gpu=use_gpu, num_cpus_per_worker=cpus)


def run_fully_async(cfg: DictConfig) -> dict[str, float]:
    """Train with a validated config through core's ``run_ppo`` (datasets, reward managers, config.yaml,
    the output summary) with `FullyAsyncRayTrainer` on two pools. Returns the last step's metrics."""
    import ray
    from verl.trainer.main_ppo import run_ppo

    from verl_recipe_fully_async.trainer import FullyAsyncRayTrainer

    if not ray.is_initialized():
        init_ray(**ray_init_kwargs(cfg))
    mapping = build_role_worker_mapping(cfg)
    return run_ppo(
        cfg,
        trainer_cls=FullyAsyncRayTrainer,
        role_worker_mapping=mapping,
        resource_pool_manager=build_resource_pool_manager(cfg, mapping),
    )


def train(argv: list[str], defaults: tuple[str, ...] = (CPU_CONFIG,)) -> dict[str, float]:
    """Load the config from ``argv`` and train; returns the last step's metrics."""
    return run_fully_async(load_recipe_config(argv, defaults))


def _main(defaults: tuple[str, ...], argv: list[str] | None) -> None:
    # Under `uv run`, Ray would rebuild the environment for its workers; they share the driver's.
    os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
    argv = list(sys.argv[1:] if argv is None else argv)
    import ray

    if not ray.is_initialized():  # before the assets' SFT warm start would start it with its own settings
        early = load_async_config(with_default_config(argv, defaults))
        OmegaConf.set_readonly(early, True)  # read as the run's config is (ray_kwargs do not depend on the assets)
        init_ray(**ray_init_kwargs(early))
    cfg = load_recipe_config(argv, defaults)
    metrics = run_fully_async(cfg)
    print(
        f"finished at step {metrics.get('training/global_step')}: wall {metrics.get('fully_async/wall_s', 0):.1f} s, "
        f"trainer idle {metrics.get('trainer/idle_ratio', 0):.0%}, rollout idle "
        f"{metrics.get('rollouter/idle_ratio', 0):.0%}; summary in {cfg.trainer.default_local_dir}/async_summary.json",
        flush=True,
    )


def _cli(prog: str, defaults: tuple[str, ...], argv: list[str] | None) -> None:
    """``--help``, ``--cfg job`` (the resolved default config), training; config errors exit with status 2."""
    from verl.trainer.config.cli import run_cli

    from verl_recipe_fully_async.config import FullyAsyncPPOConfig

    run_cli(argv, prog=prog, schema=FullyAsyncPPOConfig, main=lambda a: _main(defaults, a),
            load=lambda a: load_async_config(with_default_config(a, defaults)), about=__doc__)


def main(argv: list[str] | None = None) -> None:
    """``verl-fully-async``."""
    _cli("verl-fully-async", (CPU_CONFIG,), argv)


def main_one_step_off(argv: list[str] | None = None) -> None:
    """``verl-one-step-off``: the CPU default with the one-step-off settings on top."""
    _cli("verl-one-step-off", (CPU_CONFIG, ONE_STEP_OFF_CONFIG), argv)


if __name__ == "__main__":
    main()
