"""The PPO-family trainer: a single controller driving worker groups through a pipeline of named stages.

One training step (``train_step``) runs the pipeline ``build_pipeline`` makes for the config::

    gen -> reward -> filter -> balance -> old_log_prob -> ref -> values -> adv -> update_critic -> update_actor

(with ``distillation.enabled`` also ``teacher`` after ``ref``, and ``gkd_mix`` after ``gen`` when lmbda < 1).

Stage ``X`` is the public method ``stage_X`` (``verl.trainer.ppo.stages``), timed as ``timing_s/X``; the
pipeline (``verl.trainer.ppo.pipeline``) lets a subclass insert, replace or wrap stages by name. Data,
validation, checkpoints and tracking live in their own modules, mixed in here, so this file is the loop.
A recipe overrides public methods only; defining one of the old private hook names is an error that
names the public one (`PRIVATE_HOOKS`).
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

from omegaconf import DictConfig

from verl.protocol import DataProto
from verl.single_controller.base.resource_pool_manager import ResourcePoolManager
from verl.trainer.config import resolve_device, use_critic, use_reference_policy
from verl.trainer.config.distillation import distillation_enabled
from verl.trainer.distillation import teacher_pool
from verl.trainer.ppo import core_algos
from verl.trainer.ppo.checkpointing import CheckpointMixin, NothingToTrainError
from verl.trainer.ppo.distillation_losses import teacher_topk
from verl.trainer.ppo.dynamic_sampling import group_accumulator_for
from verl.trainer.ppo.metric_utils import (
    compute_data_metrics,
    compute_throughout_metrics,
    compute_timing_metrics,
    marked_timer,
)
from verl.trainer.ppo.pipeline import Pipeline, Stage
from verl.trainer.ppo.progress import ProgressMixin
from verl.trainer.ppo.reward_loop import RewardLoop
from verl.trainer.ppo.roles import Role, naming_step
from verl.trainer.ppo.stages import StagesMixin
from verl.trainer.ppo.trainer_data import TrainerDataMixin
from verl.trainer.ppo.validation import ValidationMixin
from verl.trainer.ppo.worker_groups import ActorRolloutRefGroup, CriticGroup, RewardModelGroup, TeacherGroup
from verl.utils.device import seed_everything

__all__ = ["NothingToTrainError", "RayPPOTrainer", "ResourcePoolManager", "Role"]

#: Old private hook -> the public method to override instead (upstream's private names included).
PRIVATE_HOOKS = {
    "_stage_generate": "stage_gen", "_stage_reward": "stage_reward", "_stage_filter": "stage_filter",
    "_stage_old_log_prob": "stage_old_log_prob", "_stage_ref_log_prob": "stage_ref",
    "_stage_values": "stage_values", "_stage_advantage": "stage_adv", "_stage_update_critic": "stage_update_critic",
    "_stage_update_actor": "stage_update_actor", "_greedy_baseline": "stage_greedy_baseline",
    "_balance_batch": "stage_balance", "_train_step": "train_step", "_rule_reward": "rule_reward",
    "_gen_input": "rollout_input", "_launch_reward": "build_pipeline (an overlapping Stage)",
    "_role_init_kwargs": "role_init_kwargs", "_spawn_ray_worker_groups": "spawn_worker_groups",
    "_validate": "validate", "_val_metrics_update": "val_metrics_update", "_save_checkpoint": "save_checkpoint",
    "_load_checkpoint": "load_checkpoint", "_save_worker_checkpoints": "save_worker_checkpoints",
    "_load_worker_checkpoints": "load_worker_checkpoints", "_trainer_state": "trainer_state",
    "_create_dataloader": "create_dataloader", "_build_loader": "build_loader", "_next_batch": "next_batch",
    "_make_logger": "make_logger", "_dump_rollout_data": "dump_rollout_data",
}  # fmt: skip


class RayPPOTrainer(TrainerDataMixin, ValidationMixin, CheckpointMixin, ProgressMixin, StagesMixin):
    """Drives the PPO-family dataflow over Ray worker groups.

    Args:
        config: the validated, read-only trainer config (``verl.trainer.config``).
        tokenizer: passed to the dataset and reward managers; the loop itself does not use it.
        role_worker_mapping: ``{Role: worker class}`` (plain or ``@ray.remote``).
        resource_pool_manager: which role runs on which resource pool.
        ray_worker_group_cls: the Ray backend's worker-group class (default ``RayWorkerGroup``; Ray is
            imported only when that backend starts workers, so ``trainer.worker_backend=local`` runs
            without Ray installed).
        reward_fn / val_reward_fn: ``fn(data, return_dict=True) -> {"reward_tensor", "reward_extra_info"}``.
        train_dataset / val_dataset / collate_fn / train_sampler: the prompt data.
    """

    #: A subclass that runs the rollout on a resource pool of its own (its own ``init_workers`` and
    #: loop, e.g. recipes/fully_async) sets this, so ``actor_rollout_ref.hybrid_engine=false`` is accepted.
    separate_rollout_pool: bool = False

    # The role worker groups (built by init_workers); their methods are the workers' (ppo.worker_groups).
    actor_rollout_wg: ActorRolloutRefGroup
    ref_policy_wg: ActorRolloutRefGroup
    critic_wg: CriticGroup
    rm_wg: RewardModelGroup
    teacher_wgs: dict[str, TeacherGroup]  # on-policy distillation: {routing key: teacher group}

    def __init_subclass__(cls, **kwargs: Any):
        super().__init_subclass__(**kwargs)
        stale = {name: PRIVATE_HOOKS[name] for name in vars(cls) if name in PRIVATE_HOOKS}
        if stale:
            raise TypeError(
                f"{cls.__name__} overrides private trainer methods the loop no longer calls: "
                + ", ".join(f"{old} (override {new})" for old, new in stale.items())
            )

    def __init__(
        self,
        config: DictConfig,
        tokenizer: Any,
        role_worker_mapping: dict[Role, Any],
        resource_pool_manager: ResourcePoolManager,
        ray_worker_group_cls: type | None = None,
        processor: Any = None,
        reward_fn: Any = None,
        val_reward_fn: Any = None,
        train_dataset: Any = None,
        val_dataset: Any = None,
        collate_fn: Any = None,
        train_sampler: Any = None,
    ):
        self.config = config
        self.tokenizer = tokenizer
        self.processor = processor
        self.role_worker_mapping = dict(role_worker_mapping)
        self.resource_pool_manager = resource_pool_manager
        self._ray_worker_group_cls = ray_worker_group_cls
        self.reward_fn = reward_fn
        self.val_reward_fn = val_reward_fn
        # resolved once here; every worker gets it (and trainer.seed, which it offsets by its rank)
        self.device_name = resolve_device(config)
        seed_everything(int(config.trainer.seed))  # the driver's own draws (reward functions, recipes)

        self.hybrid_engine = config.actor_rollout_ref.hybrid_engine
        if not self.hybrid_engine and not self.separate_rollout_pool:
            raise NotImplementedError(
                "actor_rollout_ref.hybrid_engine=false (rollout workers on a pool of their own): core's loop "
                "colocates them; the asynchronous trainers of recipes/fully_async (verl-recipe-fully-async) do not"
            )
        self.actor_role = Role.ActorRolloutRef if Role.ActorRolloutRef in self.role_worker_mapping else Role.ActorRollout
        if self.actor_role not in self.role_worker_mapping:
            raise ValueError(
                f"role_worker_mapping needs Role.ActorRollout or Role.ActorRolloutRef; got {[str(r) for r in self.role_worker_mapping]}"
            )
        self.use_critic = use_critic(config)
        self.use_reference_policy = use_reference_policy(config)
        # With ActorRolloutRef the reference lives in the actor's process; otherwise a separate group.
        self.ref_in_actor = self.actor_role == Role.ActorRolloutRef
        if self.use_reference_policy and not self.ref_in_actor and Role.RefPolicy not in self.role_worker_mapping:
            raise ValueError("a reference policy is needed (use_kl_loss or use_kl_in_reward) but role_worker_mapping has no Role.RefPolicy")
        if self.use_critic and Role.Critic not in self.role_worker_mapping:
            raise ValueError(f"algorithm.adv_estimator={config.algorithm.adv_estimator} needs a critic but role_worker_mapping has no Role.Critic")
        self.use_rm = bool(config.reward.reward_model.enable)
        if self.use_rm and Role.RewardModel not in self.role_worker_mapping:
            raise ValueError("reward.reward_model.enable=true but role_worker_mapping has no Role.RewardModel")

        if config.reward.use_reward_loop:  # scores samples while the batch generates (ppo.reward_loop)
            if self.separate_rollout_pool:
                raise ValueError(
                    f"reward.use_reward_loop=true is core's loop for the colocated rollout; {type(self).__name__} "
                    "generates on a rollout pool of its own and scores each sample as it finishes already; set "
                    "reward.use_reward_loop=false"
                )
            self.reward_loop = RewardLoop(reward_fn, int(config.reward.num_workers))
        algo = config.algorithm
        self.kl_ctrl_in_reward = core_algos.get_kl_controller(algo.kl_ctrl) if algo.use_kl_in_reward else None
        pad = tokenizer.pad_token_id if tokenizer is not None else None
        self.group_accumulator = group_accumulator_for(config, pad)  # None unless filter_groups.enable
        self.teacher_wgs = {}
        self.create_dataloader(train_dataset, val_dataset, collate_fn, train_sampler)

    # ------------------------------------------------------------------------------------- workers
    def init_workers(self) -> None:
        """Create one worker group per role (colocated per resource pool) and call ``init_model``.

        ``trainer.worker_backend=ray`` (default): Ray worker processes in placement groups.
        ``local``: the single worker in this process (``verl.single_controller.local``).
        """
        cfg = self.config
        steps = self.total_training_steps
        env = dict(device=self.device_name, seed=int(cfg.trainer.seed))  # every worker: device, seed (+ rank)
        roles: dict[Any, dict[str, Any]] = {
            self.actor_role: dict(config=cfg.actor_rollout_ref, role=str(self.actor_role), total_training_steps=steps,
                                  **env, **teacher_pool.actor_distillation_kwargs(cfg))
        }
        if self.use_critic:
            roles[Role.Critic] = dict(config=cfg.critic, total_training_steps=steps, **env)
        if self.use_reference_policy and not self.ref_in_actor:
            roles[Role.RefPolicy] = dict(config=cfg.actor_rollout_ref, role=str(Role.RefPolicy), **env)
        if self.use_rm:
            roles[Role.RewardModel] = dict(config=cfg.reward.reward_model, **env)
        if distillation_enabled(cfg):
            topk = teacher_topk(cfg.distillation.distillation_loss)
            roles.update(teacher_pool.teacher_init_kwargs(cfg, env, self.role_worker_mapping, topk))
        roles = self.role_init_kwargs(roles)
        # The driver's torch threads (verl.utils.cpu_threads): all this process's CPUs when the worker
        # computes in it; one when the workers are Ray processes and the driver only moves batches, so
        # its thread pool never competes with theirs for the cores.
        from verl.utils.cpu_threads import DRIVER_THREADS, available_cpus, set_torch_threads

        set_torch_threads(available_cpus() if cfg.trainer.worker_backend == "local" else DRIVER_THREADS)
        if cfg.trainer.worker_backend == "local":
            from verl.single_controller.base.worker_group import ClassWithInitArgs
            from verl.single_controller.local import LocalWorkerGroup

            all_wg: dict[str, Any] = {
                str(role): LocalWorkerGroup(ClassWithInitArgs(self.role_worker_mapping[role], **kwargs))
                for role, kwargs in roles.items()
            }
        else:
            all_wg = self.spawn_worker_groups(roles)

        # Actor last: a real rollout engine sizes its cache from the memory the others left.
        if self.use_critic:
            self.critic_wg = all_wg[str(Role.Critic)]
            self.critic_wg.init_model()
        if self.use_reference_policy and not self.ref_in_actor:
            self.ref_policy_wg = all_wg[str(Role.RefPolicy)]
            self.ref_policy_wg.init_model()
        if self.use_rm:
            self.rm_wg = all_wg[str(Role.RewardModel)]
            self.rm_wg.init_model()
        self.teacher_wgs = teacher_pool.start_teachers(all_wg, cfg)
        self.actor_rollout_wg = all_wg[str(self.actor_role)]
        self.actor_rollout_wg.init_model()
        if self.ref_in_actor:
            self.ref_policy_wg = self.actor_rollout_wg

    def role_init_kwargs(self, roles: dict[Role, dict[str, Any]]) -> dict[Role, dict[str, Any]]:
        """Hook: the constructor keywords of each role's worker class, before any worker starts.

        A recipe whose worker takes more than core passes (e.g. ``total_training_steps`` for a reward model
        it trains online) returns an extended copy. Default: unchanged.
        """
        return roles

    def spawn_worker_groups(self, roles: dict[Role, dict[str, Any]]) -> dict[str, Any]:
        """The resource pools, then one Ray worker group per pool holding its roles (colocated)."""
        from verl.single_controller.ray import RayClassWithInitArgs, create_colocated_worker_cls

        rpm = self.resource_pool_manager
        rpm.create_resource_pool()
        pool_to_classes: dict[Any, dict[str, Any]] = {}
        for role, kwargs in roles.items():
            cia = RayClassWithInitArgs(cls=self.role_worker_mapping[role], **kwargs)
            pool_to_classes.setdefault(rpm.get_resource_pool(role), {})[str(role)] = cia
        all_wg: dict[str, Any] = {}
        for pool, class_dict in pool_to_classes.items():
            worker_dict_cls = create_colocated_worker_cls(class_dict=class_dict)
            wg_dict = self.ray_worker_group_cls(resource_pool=pool, ray_cls_with_init=worker_dict_cls)
            all_wg.update(wg_dict.spawn(prefix_set=class_dict.keys()))
        return all_wg

    @property
    def ray_worker_group_cls(self) -> type:
        """The Ray backend's worker-group class (imports Ray: only that backend asks for it)."""
        if self._ray_worker_group_cls is None:
            from verl.single_controller.ray import RayWorkerGroup

            return RayWorkerGroup
        return self._ray_worker_group_cls

    @property
    def n_workers(self) -> int:
        """Total worker slots over all pools (GPUs, or CPU workers), for throughput per worker."""
        return sum(sum(nodes) for nodes in self.resource_pool_manager.resource_pool_spec.values())

    # ------------------------------------------------------------------------------------ the step
    def build_pipeline(self) -> Pipeline:
        """The stages of one step, in order, for this config (built once, as ``self.pipeline``).

        A recipe overrides this to insert, replace or wrap stages by name (``ppo.pipeline``). With
        ``reward.launch_reward_fn_async`` the reward stage overlaps the log-prob and value passes (they do
        not need the scores) and is joined before the filter, which then runs after those passes; the
        batch is balanced before scoring starts, as the scored snapshot must have the final row order.
        With ``reward.use_reward_loop`` the stages stay the same: ``gen`` generates in chunks and the reward
        loop scores each while the next generates; ``reward`` collects the scores (``ppo.reward_loop``).
        """
        stages = [Stage("gen", self.stage_gen)]
        if self.config.algorithm.adv_estimator == "remax":
            stages.append(Stage("greedy_baseline", self.stage_greedy_baseline))
        passes = [Stage("old_log_prob", self.stage_old_log_prob), Stage("ref", self.stage_ref),
                  Stage("values", self.stage_values)]  # fmt: skip
        if self.config.reward.launch_reward_fn_async:
            stages += [Stage("balance", self.stage_balance), Stage("reward", self.stage_reward, joined_before="filter"),
                       *passes, Stage("filter", self.stage_filter)]  # fmt: skip
        else:
            stages += [Stage("reward", self.stage_reward), Stage("filter", self.stage_filter),
                       Stage("balance", self.stage_balance), *passes]  # fmt: skip
        stages += [Stage("adv", self.stage_adv), Stage("update_critic", self.stage_update_critic),
                   Stage("update_actor", self.stage_update_actor),
                   Stage("dump_rollout", self.stage_dump_rollout, when=lambda: bool(self.config.trainer.rollout_data_dir)),
                   Stage("testing", self.stage_testing, when=self.is_test_step),
                   Stage("save_checkpoint", self.stage_save_checkpoint, when=self.is_save_step)]  # fmt: skip
        pipeline = Pipeline(stages)
        if distillation_enabled(self.config):  # the teachers score the student's samples before the update
            pipeline.insert_after("ref", Stage("teacher", self.stage_teacher))
            if float(self.config.distillation.distillation_loss.lmbda) < 1.0:
                pipeline.insert_after("gen", Stage("gkd_mix", self.stage_gkd_mix))
        return pipeline

    def is_test_step(self) -> bool:
        """Whether this step ends with validation (every ``trainer.test_freq`` steps and the last)."""
        freq = self.config.trainer.test_freq
        last = self.global_steps >= self.total_training_steps
        return self.val_reward_fn is not None and freq > 0 and (last or self.global_steps % freq == 0)

    def is_save_step(self) -> bool:
        """Whether this step ends with a checkpoint (every ``trainer.save_freq`` steps and the last)."""
        freq = self.config.trainer.save_freq
        return freq > 0 and (self.global_steps >= self.total_training_steps or self.global_steps % freq == 0)

    @cached_property
    def pipeline(self) -> Pipeline:
        """This trainer's step (`build_pipeline`, built on first use)."""
        return self.build_pipeline()

    def train_step(self, batch: DataProto, metrics: dict, timing_raw: dict) -> DataProto | None:
        """One step over a prompt batch through the pipeline; None when a stage (the filter) asks for
        more prompts first."""
        batch.meta_info.update(global_steps=self.global_steps, temperature=self.config.actor_rollout_ref.rollout.temperature)
        return self.pipeline.run(batch, metrics, timing_raw)

    def shutdown(self) -> None:
        """Free this run's Ray resources: removing the pools' placement groups ends the worker processes
        scheduled in them, so the next run in the same Ray session gets its CPUs/GPUs back; and end the
        reward loop's threads."""
        if self.reward_loop is not None:
            self.reward_loop.close()
        for pool in self.resource_pool_manager.resource_pool_dict.values():  # none with the local backend
            pool.remove()

    def fit(self) -> dict[str, float]:
        """Train until ``total_training_steps``; returns the last step's metrics.

        Raises ``NothingToTrainError`` when a resumed checkpoint already reached the last step.
        """
        self.global_steps = 0
        self.check_steps_remaining()  # before touching the workers: fail fast and loudly
        self.load_checkpoint()
        total = self.total_training_steps
        self.logger = self.make_logger()
        last: dict[str, float] = {}
        try:
            if self.val_reward_fn is not None and self.config.trainer.val_before_train:
                val_metrics = self.validate()
                self.logger.log(val_metrics, step=self.global_steps)
                if self.config.trainer.val_only:
                    return val_metrics
            bar = self.progress_bar(initial=self.global_steps, total=total)
            self.global_steps += 1
            while self.global_steps <= total:
                batch_dict = self.next_batch()
                metrics: dict[str, float] = {}
                timing_raw: dict[str, float] = {}
                with marked_timer("step", timing_raw), naming_step(self.global_steps):
                    batch = self.train_step(DataProto.from_single_dict(batch_dict), metrics, timing_raw)
                if batch is None:
                    continue
                metrics["training/global_step"] = self.global_steps
                metrics["training/epoch"] = self.epoch
                metrics.update(compute_data_metrics(batch, use_critic=self.use_critic))
                metrics.update(compute_timing_metrics(batch, timing_raw))
                metrics.update(compute_throughout_metrics(batch, timing_raw, self.n_workers))
                self.logger.log(metrics, step=self.global_steps)
                self.advance_progress(bar, metrics)
                last = metrics
                self.global_steps += 1
            self.global_steps = total  # the loop leaves it one past the last step
            if bar is not None:
                bar.close()
        finally:
            self.logger.finish()
        return last
