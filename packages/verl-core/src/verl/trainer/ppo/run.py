"""Build and run a PPO-family trainer from a validated config: roles and pools from the registries,
tokenizer, datasets and reward managers, then ``fit``. ``verl.trainer.main_ppo`` is the command line over
this (and re-exports it under upstream's module); the embedded default (``verl.trainer.demo``) and the
recipes call it too.

Worker classes come from ``verl.registries.WORKER_CLASSES`` (verl-workers), the reward manager from
``REWARD_MANAGERS`` (verl-rewards) and the tokenizer from ``TOKENIZER_LOADERS`` (verl-workers), so core
never imports those packages or transformers by name; a missing one is an error naming what to install.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from omegaconf import DictConfig

from verl.trainer.config import ConfigError, config_to_yaml, resolve_device, tokenizer_path
from verl.trainer.config import use_critic as _use_critic
from verl.trainer.config import use_reference_policy as _use_ref
from verl.trainer.distillation.teacher_pool import teacher_resource_pools, teacher_roles
from verl.utils.ray_start import ray_init_kwargs, reuse_driver_env_for_workers


def cpus_per_worker(cluster_cpus: float, n_workers: int) -> float:
    """CPUs each CPU worker reserves (its Ray ``num_cpus``): the cluster's CPUs split evenly, whole
    CPUs when there are at least as many CPUs as workers (a worker then runs that many torch threads,
    ``verl.utils.cpu_threads``), a fraction otherwise so a small machine still hosts every worker
    (one thread each)."""
    n_workers = max(n_workers, 1)
    if cluster_cpus >= n_workers:
        return float(int(cluster_cpus // n_workers))
    return cluster_cpus / n_workers


def build_role_worker_mapping(config: DictConfig) -> dict:
    """Role -> worker class from the registry. The reference shares the actor's process when needed."""
    from verl.registries import WORKER_CLASSES
    from verl.trainer.ppo.ray_trainer import Role

    # Multi-turn rollouts run agent loops inside the actor's process (verl-agent's subclass of the worker).
    # strategy=megatron roles are separate classes (their data goes to Megatron's data-parallel ranks)
    multi_turn = config.actor_rollout_ref.rollout.multi_turn.enable
    actor_key = "agent_actor_rollout_ref" if multi_turn else "actor_rollout_ref"
    if config.actor_rollout_ref.actor.strategy == "megatron":
        actor_key = "megatron_actor_rollout_ref"
    mapping = {
        (Role.ActorRolloutRef if _use_ref(config) else Role.ActorRollout): WORKER_CLASSES.get(actor_key)
    }
    if _use_critic(config):
        critic_key = "megatron_critic" if config.critic.strategy == "megatron" else "critic"
        mapping[Role.Critic] = WORKER_CLASSES.get(critic_key)
    if config.reward.reward_model.enable:
        mapping[Role.RewardModel] = WORKER_CLASSES.get("reward_model")
    mapping.update(teacher_roles(config))  # on-policy distillation's teachers (none when it is off)
    return mapping


def build_resource_pool_manager(config: DictConfig, mapping: dict):
    """One pool of ``nnodes x n_gpus_per_node`` workers shared by every role (colocated); with
    ``reward.reward_model.enable_resource_pool`` the reward model gets a pool of its own
    (``reward.reward_model.nnodes x n_gpus_per_node``), and with ``distillation.enabled`` every teacher
    one (``verl.trainer.distillation.teacher_pool``)."""
    from verl.trainer.ppo.ray_trainer import ResourcePoolManager, Role

    t = config.trainer
    rm = config.reward.reward_model
    own_rm_pool = bool(rm.enable and rm.enable_resource_pool)
    n_workers = int(t.nnodes) * int(t.n_gpus_per_node)
    if own_rm_pool:
        n_workers += int(rm.nnodes) * int(rm.n_gpus_per_node)
    teacher_spec, teacher_pools = teacher_resource_pools(config)  # one pool per teacher (distillation)
    n_workers += sum(sum(nodes) for nodes in teacher_spec.values())
    use_gpu = resolve_device(config) == "cuda"
    cpus = 1.0
    if not use_gpu and t.worker_backend == "ray":
        # CPU workers do the arithmetic: each reserves its share of the cluster's CPUs and runs that
        # many torch threads (the driver runs one); fractional so a 2-core machine hosts 2+ workers.
        # The share is of the CPUs free now, so worker groups already holding CPUs (another run in the
        # same Ray session) are not waited for.
        import ray

        free = float(ray.available_resources().get("CPU", 0.0))
        cpus = cpus_per_worker(free if free > 0 else float(ray.cluster_resources().get("CPU", 1)), n_workers)
    spec = {"global_pool": [int(t.n_gpus_per_node)] * int(t.nnodes)}
    pools = {role: "global_pool" for role in mapping}
    if own_rm_pool:
        spec["reward_pool"] = [int(rm.n_gpus_per_node)] * int(rm.nnodes)
        pools[Role.RewardModel] = "reward_pool"
    spec.update(teacher_spec)
    pools.update({role: pool for role, pool in teacher_pools.items() if role in mapping})
    return ResourcePoolManager(spec, pools, use_gpu=use_gpu, num_cpus_per_worker=cpus)


def _trust_tokenizer_code(config: DictConfig) -> bool:
    """The tokenizer's and processor's own code from their folder: upstream's ``data.trust_remote_code``, or the
    model's ``trust_remote_code`` (the tokenizer lives with the model by default)."""
    return bool(config.data.trust_remote_code) or bool(config.actor_rollout_ref.model.trust_remote_code)


def load_tokenizer(config: DictConfig):
    """The tokenizer through verl-workers' registered loader (core never imports transformers)."""
    from verl.trainer.model_builders import load_tokenizer as _load

    tokenizer = _load(
        tokenizer_path(config), trust_remote_code=_trust_tokenizer_code(config)
    )
    template = config.actor_rollout_ref.model.custom_chat_template
    if template is not None:
        # the driver renders every prompt (the dataset), so its tokenizer's template is the one that counts
        tokenizer.chat_template = template
    return tokenizer


def load_processor(config: DictConfig):
    """A vision-language model's processor (None for text-only models), through verl-workers."""
    from verl.trainer.model_builders import load_processor as _load

    return _load(
        tokenizer_path(config), trust_remote_code=_trust_tokenizer_code(config)
    )


def build_trainer(
    config: DictConfig,
    tokenizer: Any = None,
    reward_fn: Any = None,
    val_reward_fn: Any = None,
    role_worker_mapping: dict | None = None,
    trainer_cls: type | None = None,
    resource_pool_manager: Any = None,
    pool_builder: Any = None,
):
    """Everything ``fit`` needs: tokenizer, datasets, reward managers, roles and pools, the trainer.

    ``resource_pool_manager``: the pools and which role runs where; ``pool_builder(config, mapping)``
    makes them instead (default: `build_resource_pool_manager`: one pool for every role, the reward
    model's own with ``enable_resource_pool``); recipes with pools of their own (recipes/fully_async)
    pass theirs."""
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer
    from verl.trainer.ppo.reward import load_reward_manager
    from verl.utils.dataset.rl_dataset import collate_fn, create_rl_dataset

    tokenizer = tokenizer if tokenizer is not None else load_tokenizer(config)
    if reward_fn is None:
        reward_fn = load_reward_manager(config, tokenizer, num_examine=config.reward.num_examine)
    if val_reward_fn is None and config.data.val_files:
        val_reward_fn = load_reward_manager(config, tokenizer, num_examine=1)
    processor = load_processor(config)
    train_dataset = create_rl_dataset(
        config.data.train_files, config.data, tokenizer, processor, is_train=True
    )
    val_dataset = None
    if config.data.val_files:
        val_dataset = create_rl_dataset(
            config.data.val_files, config.data, tokenizer, processor, is_train=False
        )
    mapping = role_worker_mapping if role_worker_mapping is not None else build_role_worker_mapping(config)
    if resource_pool_manager is None:
        resource_pool_manager = (pool_builder or build_resource_pool_manager)(config, mapping)
    return (trainer_cls or RayPPOTrainer)(
        config,
        tokenizer,
        mapping,
        resource_pool_manager,
        reward_fn=reward_fn,
        val_reward_fn=val_reward_fn,
        train_dataset=train_dataset,
        val_dataset=val_dataset,
        collate_fn=collate_fn,
        processor=processor,
    )


def run_ppo(config: DictConfig, **build_kwargs: Any) -> dict[str, float]:
    """Start Ray (unless running), record the config next to the outputs, train, say where things went.

    The driver's own parts (tokenizer, reward managers) are built first, so what their options get wrong
    (an option the reward manager does not take, overlong shaping without the dapo manager) is reported
    before Ray starts."""
    reuse_driver_env_for_workers()
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer
    from verl.utils.checkpoint import atomic_write_text

    trainer_cls = build_kwargs.get("trainer_cls") or RayPPOTrainer
    if not config.actor_rollout_ref.hybrid_engine and not trainer_cls.separate_rollout_pool:
        raise ConfigError([  # the trainer refuses it too, but only once Ray runs
            "actor_rollout_ref.hybrid_engine=false puts the rollout on a pool of its own, which this trainer's "
            "colocated loop does not do; use the asynchronous trainers of recipes/fully_async"
        ])
    build_kwargs = _driver_parts(config, build_kwargs)

    if config.trainer.worker_backend == "local":
        # no Ray: the worker runs in this process, which need not have Ray installed at all
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # what ray_init_kwargs gives Ray workers
    else:
        _start_ray(config)
    out_dir = config.trainer.default_local_dir
    os.makedirs(out_dir, exist_ok=True)
    atomic_write_text(os.path.join(out_dir, "config.yaml"), config_to_yaml(config))
    trainer = build_trainer(config, **build_kwargs)
    trainer.check_steps_remaining()  # a finished run fails here, before any worker starts
    trainer.init_workers()
    try:
        metrics = trainer.fit()
    finally:
        ray = sys.modules.get("ray")  # imported by the Ray backend only
        if config.ray_kwargs.timeline_json_file and ray is not None and ray.is_initialized():
            ray.timeline(filename=config.ray_kwargs.timeline_json_file)  # Chrome trace of the Ray tasks
        trainer.shutdown()
    _print_outputs(config, metrics)
    return metrics


def _driver_parts(config: DictConfig, build_kwargs: dict[str, Any]) -> dict[str, Any]:
    """``build_kwargs`` with the tokenizer and the reward managers made where not given (as `build_trainer`
    would make them)."""
    from verl.trainer.ppo.reward import load_reward_manager

    kwargs = dict(build_kwargs)
    if kwargs.get("tokenizer") is None:
        kwargs["tokenizer"] = load_tokenizer(config)
    if kwargs.get("reward_fn") is None:
        kwargs["reward_fn"] = load_reward_manager(config, kwargs["tokenizer"], num_examine=config.reward.num_examine)
    if kwargs.get("val_reward_fn") is None and config.data.val_files:
        kwargs["val_reward_fn"] = load_reward_manager(config, kwargs["tokenizer"], num_examine=1)
    return kwargs


def _start_ray(config: DictConfig) -> None:
    """Start Ray with `ray_init_kwargs` unless it is running already."""
    import ray

    from verl.utils.ray_start import init_ray

    if ray.is_initialized():
        return
    init_ray(**ray_init_kwargs(config))
    if not ray_init_kwargs(config).get("address"):
        # this process owns the cluster it just started: if it is SIGKILLed, the reaper ends Ray's
        # processes (agents otherwise outlive it, reparented to init)
        from verl.utils.reaper import start_reaper

        start_reaper()


def _print_outputs(config: DictConfig, metrics: dict[str, float]) -> None:
    out = os.path.abspath(config.trainer.default_local_dir)
    lines = [f"training finished: {out}", f"  config:      {os.path.join(out, 'config.yaml')}"]
    if "jsonl" in config.trainer.logger:
        lines.append(f"  metrics:     {os.path.join(out, 'metrics.jsonl')}")
    if "tensorboard" in config.trainer.logger:
        lines.append(
            f"  tensorboard: {os.environ.get('TENSORBOARD_DIR') or os.path.join(out, 'tensorboard')}"
        )
    if os.path.exists(os.path.join(out, "reward_curve.png")):
        lines.append(f"  plot:        {os.path.join(out, 'reward_curve.png')}")
    if config.trainer.save_freq > 0:
        lines.append(f"  checkpoints: {out}/global_step_*")
    if "critic/score/mean" in metrics:
        lines.append(f"  last reward: {metrics['critic/score/mean']:.4f}")
    print("\n".join(lines), flush=True)

