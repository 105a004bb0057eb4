"""The recipe's entry point, ``verl-dapo``.

    uv run --package verl-recipe-dapo verl-dapo [key=value ...]
        CPU default (configs/dapo_cpu.yaml): builds a tiny Qwen2, warm-starts it with SFT on the
        built-in arithmetic task, then trains it with DAPO; metrics, reward curve in trainer.default_local_dir.
    uv run --package verl-recipe-dapo verl-dapo --config recipes/dapo/configs/dapo_qwen2.5_32b.yaml [key=value ...]
        The paper's setting on GPUs (set data.train_files, data.val_files, actor_rollout_ref.model.path).

Config order (later wins): core's defaults < ``--config`` files (the CPU default when none is given) <
``key=value`` overrides. Keys and validation are core's (``verl.trainer.config``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from omegaconf import DictConfig
from verl.trainer.config import load_config, resolve_device, tokenizer_path, use_critic, validate_config

CPU_CONFIG = "dapo_cpu.yaml"
PAPER_CONFIG = "dapo_qwen2.5_32b.yaml"


def configs_dir() -> Path:
    """The recipe's configs: inside the package in a wheel, ``recipes/dapo/configs`` in the repo."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "configs", here.parents[1] / "configs"):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"no configs directory next to {here} nor in {here.parents[1]}")


def with_default_config(argv: list[str]) -> list[str]:
    """Prepend ``--config <CPU default>`` unless the command line names a config file."""
    if any(a == "--config" or a.startswith("--config=") for a in argv):
        return list(argv)
    return ["--config", str(configs_dir() / CPU_CONFIG), *argv]


def build_reward_fn(cfg: DictConfig, tokenizer: Any, num_examine: int) -> Any:
    """The configured reward manager; the ``dapo`` manager gets the overlong buffer from
    ``reward.overlong_buffer`` and ``max_resp_len`` from ``data.max_response_length``."""
    from omegaconf import OmegaConf
    from verl.rewards.managers.loader import load_reward_manager

    extra: dict[str, Any] = {}
    if cfg.reward.reward_manager == "dapo":
        extra["max_resp_len"] = int(cfg.data.max_response_length)
        extra["overlong_buffer"] = OmegaConf.to_container(cfg.reward.overlong_buffer, resolve=True)
    return load_reward_manager(cfg.reward, tokenizer, num_examine, **extra)


def init_ray(cfg: DictConfig) -> None:
    """Start Ray unless it runs already (tests start it once per session).

    Under ``uv run`` Ray would otherwise rebuild the whole workspace environment for its workers (its
    uv integration); the workers share the driver's environment here, so that is switched off. The
    switch is read when Ray is imported, hence before the import.
    """
    os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
    import ray

    if ray.is_initialized():
        return
    kwargs = {k: v for k, v in dict(cfg.ray_kwargs.ray_init).items() if v is not None}
    env = {"TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    ray.init(include_dashboard=False, runtime_env={"env_vars": env}, **kwargs)


def run_dapo(cfg: DictConfig, trainer_cls: type | None = None) -> dict[str, float]:
    """Train with a validated config; returns the last step's metrics."""
    from verl.registries import WORKER_CLASSES
    from verl.single_controller.ray import ResourcePoolManager
    from verl.trainer.ppo.ray_trainer import Role
    from verl.utils.dataset import collate_fn, create_rl_dataset
    from verl.workers.tokenizer import hf_tokenizer

    from verl_recipe_dapo.dapo_ray_trainer import RayDAPOTrainer

    trainer_cls = trainer_cls or RayDAPOTrainer
    init_ray(cfg)
    tokenizer = hf_tokenizer(
        tokenizer_path(cfg), trust_remote_code=bool(cfg.actor_rollout_ref.model.trust_remote_code)
    )
    uses_ref = bool(cfg.actor_rollout_ref.actor.use_kl_loss or cfg.algorithm.use_kl_in_reward)
    actor_role = Role.ActorRolloutRef if uses_ref else Role.ActorRollout
    mapping = {actor_role: WORKER_CLASSES.get("actor_rollout_ref")}
    if use_critic(cfg):
        mapping[Role.Critic] = WORKER_CLASSES.get("critic")
    pools = ResourcePoolManager(
        resource_pool_spec={"global_pool": [int(cfg.trainer.n_gpus_per_node)] * int(cfg.trainer.nnodes)},
        mapping={role: "global_pool" for role in mapping},
        use_gpu=resolve_device(cfg) == "cuda",
    )
    val_dataset = None
    if cfg.data.val_files:
        val_dataset = create_rl_dataset(cfg.data.val_files, cfg.data, tokenizer, is_train=False)
    trainer = trainer_cls(
        config=cfg,
        tokenizer=tokenizer,
        role_worker_mapping=mapping,
        resource_pool_manager=pools,
        reward_fn=build_reward_fn(cfg, tokenizer, int(cfg.reward.num_examine)),
        val_reward_fn=build_reward_fn(cfg, tokenizer, 1) if val_dataset is not None else None,
        train_dataset=create_rl_dataset(cfg.data.train_files, cfg.data, tokenizer),
        val_dataset=val_dataset,
        collate_fn=collate_fn,
    )
    trainer.init_workers()
    return trainer.fit()


def load_dapo_config(argv: list[str]) -> DictConfig:
    """Load (CPU default when no ``--config``), prepare the CPU assets when the config leaves the model or
    data unset, validate; the result is read-only."""
    from verl_recipe_dapo.cpu_assets import asset_overrides

    argv = with_default_config(argv)
    cfg = load_config(argv)
    extra = asset_overrides(cfg)
    if extra:
        cfg = load_config([*argv, *extra])
    validate_config(cfg)
    return cfg


def train(argv: list[str]) -> dict[str, float]:
    """Load the config from ``argv`` and train; returns the last step's metrics."""
    return run_dapo(load_dapo_config(argv))


def main(argv: list[str] | None = None) -> None:
    """The ``verl-dapo`` console script (returns None: a returned value would become the exit status)."""
    os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
    cfg = load_dapo_config(list(sys.argv[1:] if argv is None else argv))
    metrics = run_dapo(cfg)
    out = cfg.trainer.default_local_dir
    score = metrics.get("critic/score/mean")
    print(
        f"DAPO finished at step {metrics.get('training/global_step')}: last train score "
        f"{score if score is None else round(score, 4)}; metrics and reward curve in {out}",
        flush=True,
    )


if __name__ == "__main__":
    main()
