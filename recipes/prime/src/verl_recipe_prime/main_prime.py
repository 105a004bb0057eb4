"""The recipe's entry point, ``verl-prime``.

    uv run --package verl-recipe-prime verl-prime [key=value ...]
        CPU default (configs/prime_cpu.yaml): the built-in multi-step arithmetic task and a tiny Qwen2
        warm-started on it, then PRIME; metrics and reward curve in trainer.default_local_dir.
    uv run --package verl-recipe-prime verl-prime reward.reward_model.enable=false
        The same run without the implicit PRM: RLOO on the outcome reward alone (the A/B baseline).
    uv run --package verl-recipe-prime verl-prime --config recipes/prime/configs/prime_eurus2_7b_sft.yaml ...
        Upstream's setting on GPUs (set data.train_files, data.val_files, actor_rollout_ref.model.path).

Config order (later wins): core's defaults < ``--config`` files (the CPU default when none is given) <
``key=value`` overrides, over core's schema plus the PRIME keys (``verl_recipe_prime.config``).
Training is core's ``main_ppo.run_ppo`` with `RayPRIMETrainer`, the PRM worker mapped to
``Role.RewardModel`` and, with ``reward.reward_model.enable_resource_pool``, a pool of its own.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from omegaconf import DictConfig
from verl.trainer.config.recipes import load_with_built_in, recipe_configs_dir
from verl.trainer.config.recipes import with_default_config as _with_default_config
from verl.utils.ray_start import init_ray

CPU_CONFIG = "prime_cpu.yaml"
PAPER_CONFIG = "prime_eurus2_7b_sft.yaml"
PRM_POOL = "reward_pool"


def configs_dir() -> Path:
    """The recipe's configs: inside the package in a wheel, ``recipes/prime/configs`` in the repo."""
    return recipe_configs_dir(__file__)


def with_default_config(argv: list[str]) -> list[str]:
    """Prepend ``--config <CPU default>`` unless the command line names a config file."""
    return _with_default_config(argv, configs_dir() / CPU_CONFIG)


def load_recipe_config(argv: list[str]) -> DictConfig:
    """Load (CPU default when no ``--config``); when the config leaves the model or data unset, point it at
    the built-in task and a warm-started tiny model (``cpu_assets``, built once under
    ``{trainer.default_local_dir}/assets``); validate. The result is read-only."""
    from verl_recipe_prime.config import load_prime_config, validate_prime_config
    from verl_recipe_prime.cpu_assets import asset_overrides

    return load_with_built_in(
        with_default_config(argv),
        load_prime_config,
        validate_prime_config,
        made=("data.train_files", "actor_rollout_ref.model.path"),
        overrides=lambda cfg, _unset: asset_overrides(cfg),
    )


def build_role_worker_mapping(cfg: DictConfig) -> dict:
    """Core's mapping, with the implicit PRM worker as the reward-model role when it is enabled."""
    from verl.registries import WORKER_CLASSES
    from verl.trainer.main_ppo import build_role_worker_mapping as core_mapping
    from verl.trainer.ppo.ray_trainer import Role

    from verl_recipe_prime.prm_worker import WORKER_NAME

    mapping = dict(core_mapping(cfg))
    if cfg.reward.reward_model.enable:
        mapping[Role.RewardModel] = WORKER_CLASSES.get(WORKER_NAME)
    return mapping


def build_prm_resource_pool_manager(cfg: DictConfig, mapping: dict) -> Any:
    """With ``reward.reward_model.enable_resource_pool``: core's shared pool for the actor and a second pool
    of ``nnodes x n_gpus_per_node`` workers for the PRM (CPU workers split the cluster's CPUs over both).
    Needs Ray running (it reads the cluster's CPU count)."""
    import ray
    from verl.trainer.config import resolve_device
    from verl.trainer.ppo.ray_trainer import ResourcePoolManager, Role

    rm, t = cfg.reward.reward_model, cfg.trainer
    spec = {
        "global_pool": [int(t.n_gpus_per_node)] * int(t.nnodes),
        PRM_POOL: [int(rm.n_gpus_per_node)] * int(rm.nnodes),
    }
    use_gpu = resolve_device(cfg) == "cuda"
    cpus = 1.0
    if not use_gpu:
        workers = sum(sum(nodes) for nodes in spec.values())
        cpus = min(1.0, float(ray.cluster_resources().get("CPU", 1)) / workers)
    roles = {role: (PRM_POOL if role == Role.RewardModel else "global_pool") for role in mapping}
    return ResourcePoolManager(spec, roles, use_gpu=use_gpu, num_cpus_per_worker=cpus)


def run_prime(cfg: DictConfig) -> dict[str, float]:
    """Train with a validated config through core's ``run_ppo`` (Ray start, datasets, reward manager,
    worker groups, tracker) with `RayPRIMETrainer`. Returns the last step's metrics."""
    from verl.trainer.main_ppo import ray_init_kwargs, run_ppo

    from verl_recipe_prime.prime_ray_trainer import RayPRIMETrainer

    rm = cfg.reward.reward_model
    mapping = build_role_worker_mapping(cfg)
    pools = None  # core's one shared pool, built by run_ppo once Ray runs
    if rm.enable and rm.enable_resource_pool:
        os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
        import ray

        if not ray.is_initialized():  # started as run_ppo would: the PRM pool's CPU share needs the cluster
            init_ray(**ray_init_kwargs(cfg))
        pools = build_prm_resource_pool_manager(cfg, mapping)
    return run_ppo(cfg, role_worker_mapping=mapping, resource_pool_manager=pools, trainer_cls=RayPRIMETrainer)


def train(argv: list[str]) -> dict[str, float]:
    """Load the config from ``argv`` and train; returns the last step's metrics."""
    return run_prime(load_recipe_config(argv))


def main(argv: list[str] | None = None) -> None:
    """The ``verl-prime`` command: ``--help``, ``--cfg job`` (the CPU default's resolved config), training;
    a config error prints its problems and exits with status 2."""
    from verl.trainer.config.cli import run_cli

    from verl_recipe_prime.config import PRIMETrainerConfig, load_prime_config

    run_cli(argv, prog="verl-prime", schema=PRIMETrainerConfig, main=_main, load=lambda a: load_prime_config(with_default_config(a)), about=__doc__)


def _main(argv: list[str] | None = None) -> None:
    """The ``verl-prime`` console script (returns None: a returned value would become the exit status)."""
    # Under `uv run`, Ray would rebuild the environment for its workers; they share the driver's.
    # Ray reads this when first imported, hence before anything imports it.
    os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
    cfg = load_recipe_config(list(sys.argv[1:] if argv is None else argv))
    metrics = run_prime(cfg)  # core prints where the config, metrics and plot went
    shown = {
        k: round(v, 4)
        for k, v in metrics.items()
        if k.startswith(("val/", "val-prm/")) or k == "prime/all_acc/mean"
    }
    print(f"PRIME finished at step {metrics.get('training/global_step')}: {shown}", flush=True)


if __name__ == "__main__":
    main()
