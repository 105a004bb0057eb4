"""Entry points: ``verl-fully-async`` (fully asynchronous) and ``verl-one-step-off`` (one-step-off).

    uv run --package verl-recipe-fully-async verl-fully-async [key=value ...]     # configs/fully_async_cpu.yaml
    uv run --package verl-recipe-fully-async verl-one-step-off [key=value ...]    # + configs/one_step_off_cpu.yaml
    uv run --package verl-recipe-fully-async verl-fully-async --config recipes/fully_async/configs/<file>.yaml ...

Core's recipe runner with this recipe's schema (``config``), Ray started with one BLAS thread share per
worker of both pools before the CPU assets are made (core's addition task and a tiny model warm-started
by core's SFT trainer), the rollout pool's worker, two pools and `FullyAsyncRayTrainer`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from omegaconf import DictConfig, OmegaConf
from verl.trainer.recipe_runner import BuiltIn, Recipe

from verl_recipe_fully_async.config import (
    FullyAsyncPPOConfig,
    load_async_config,
    rollout_world_size,
    validate_async_config,
)

CPU_CONFIG = "fully_async_cpu.yaml"
ONE_STEP_OFF_CONFIG = "one_step_off_cpu.yaml"
PAPER_CONFIG = "fully_async_qwen2.5_7b.yaml"
SFT_STEPS = 180  # the demo's warm start
SFT_WORKERS = 2


def built_in(cfg: DictConfig, built: BuiltIn) -> list[str]:
    """Core's embedded default (``verl.trainer.demo``): the addition task and the tiny Qwen2 warm-started
    by core's SFT trainer on `SFT_WORKERS` workers, so runs compare directly with ``main_ppo``'s loop."""
    from verl.trainer.demo import asset_overrides

    return asset_overrides(cfg, SFT_STEPS, workers=SFT_WORKERS)


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


def build_role_worker_mapping(cfg: DictConfig, core_mapping: dict | None = None) -> dict:
    """Core's roles with this recipe's worker for the actor, plus ``Role.Rollout`` for the rollout pool."""
    from verl.trainer.main_ppo import build_role_worker_mapping as core_roles
    from verl.trainer.ppo.ray_trainer import Role

    if cfg.actor_rollout_ref.rollout.multi_turn.enable:  # agent loops (verl-agent)
        from verl_recipe_fully_async.agent_worker import AgentAsyncActorRolloutWorker as worker_cls
    else:
        from verl_recipe_fully_async.workers import AsyncActorRolloutWorker as worker_cls

    mapping = dict(core_roles(cfg) if core_mapping is None else core_mapping)
    for role in (Role.ActorRollout, Role.ActorRolloutRef):
        if role in mapping:
            mapping[role] = worker_cls
    mapping[Role.Rollout] = worker_cls
    return mapping


def build_resource_pool_manager(cfg: DictConfig, mapping: dict):
    """Two pools: ``trainer_pool`` (trainer.nnodes x n_gpus_per_node) for every role but the rollout,
    ``rollout_pool`` (rollout.nnodes x rollout.n_gpus_per_node) for it; a third, ``reward_pool``, for a
    reward model. CPU workers get an equal share
    of the cluster's CPUs (fractional on a small machine)."""
    import ray
    from verl.trainer.config import resolve_device
    from verl.trainer.ppo.ray_trainer import ResourcePoolManager, Role

    t, r, rm = cfg.trainer, cfg.rollout, cfg.reward.reward_model
    spec = {
        "trainer_pool": [int(t.n_gpus_per_node)] * int(t.nnodes),
        "rollout_pool": [int(r.n_gpus_per_node)] * int(r.nnodes),
    }
    if rm.enable:  # validated: a pool of its own
        spec["reward_pool"] = [int(rm.n_gpus_per_node)] * int(rm.nnodes)
    use_gpu = resolve_device(cfg) == "cuda"
    cpus = 1.0
    if not use_gpu:
        workers = sum(sum(v) for v in spec.values())
        cpus = min(1.0, float(ray.cluster_resources().get("CPU", 1)) / workers)
    own = {Role.Rollout: "rollout_pool", Role.RewardModel: "reward_pool"}
    pools = {role: own.get(role, "trainer_pool") for role in mapping}
    return ResourcePoolManager(spec, pools, use_gpu=use_gpu, num_cpus_per_worker=cpus)


RECIPE = Recipe(
    "fully_async", __file__, load=load_async_config, validate=validate_async_config, built_in=built_in,
    roles=build_role_worker_mapping, pools=build_resource_pool_manager, ray_init=ray_init_kwargs,
    trainer_cls="verl_recipe_fully_async.trainer:FullyAsyncRayTrainer",
    summary=("fully_async/wall_s", "trainer/idle_ratio", "rollouter/idle_ratio", "val-core/*"),
    schema=FullyAsyncPPOConfig, about=__doc__,
)
#: ``verl-one-step-off``: the CPU default with the one-step-off settings on top.
ONE_STEP_OFF = replace(RECIPE, name="one_step_off", cpu_configs=(CPU_CONFIG, ONE_STEP_OFF_CONFIG))
