"""The PPO-family trainer: a single controller driving worker groups through named stages.

One training step (``_train_step``) reads as the algorithm does::

    generate -> reward -> filter -> old log-prob -> ref log-prob -> values -> advantage
             -> update critic -> update actor (after trainer.critic_warmup)

Each stage is a method ``_stage_<name>(batch, metrics) -> batch`` that a subclass or a recipe overrides
on its own (e.g. DAPO's dynamic sampling overrides ``_stage_filter``). Validation, checkpointing and
resuming live in ``verl.trainer.ppo.stages`` (mixed in here) to keep this file about the loop.
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig

from verl.protocol import DataProto
from verl.single_controller.ray import (
    RayClassWithInitArgs,
    RayWorkerGroup,
    ResourcePoolManager,
    create_colocated_worker_cls,
)
from verl.trainer.config import resolve_device, use_critic, use_reference_policy
from verl.trainer.distillation import gkd, teacher_pool, teacher_step
from verl.trainer.ppo import core_algos
from verl.trainer.ppo.balance import balance_batch
from verl.trainer.ppo.dumps import REWARD_EXTRA_KEYS, rollout_records, write_generations
from verl.trainer.ppo.metric_utils import (
    compute_data_metrics,
    compute_throughout_metrics,
    compute_timing_metrics,
    marked_timer,
    reduce_metrics,
)
from verl.trainer.ppo.reward import compute_reward
from verl.trainer.ppo.roles import Role, merge_outputs, naming_step
from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_and_add_to_batch
from verl.trainer.ppo.stages import NothingToTrainError, TrainerIOMixin
from verl.utils.device import seed_everything

__all__ = ["NothingToTrainError", "RayPPOTrainer", "ResourcePoolManager", "Role"]

# Prompt tensors the rollout replaces with prompt+response tensors of the same names.
_PROMPT_TENSOR_KEYS = ("input_ids", "attention_mask", "position_ids")


class RayPPOTrainer(TrainerIOMixin):
    """Drives the PPO-family dataflow over Ray worker groups.

    Args:
        config: the validated, read-only trainer config (``verl.trainer.config``).
        tokenizer: passed to the dataset and reward managers; the loop itself does not use it.
        role_worker_mapping: ``{Role: worker class}`` (plain or ``@ray.remote``).
        resource_pool_manager: which role runs on which resource pool.
        reward_fn / val_reward_fn: ``fn(data, return_dict=True) -> {"reward_tensor", "reward_extra_info"}``.
        train_dataset / val_dataset / collate_fn / train_sampler: the prompt data.
    """

    #: A subclass that runs the rollout on a resource pool of its own (its own ``init_workers`` and
    #: loop, e.g. recipes/fully_async) sets this, so ``actor_rollout_ref.hybrid_engine=false`` is accepted.
    separate_rollout_pool: bool = False

    def __init__(
        self,
        config: DictConfig,
        tokenizer: Any,
        role_worker_mapping: dict[Role, Any],
        resource_pool_manager: ResourcePoolManager,
        ray_worker_group_cls: type = RayWorkerGroup,
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
        self.ray_worker_group_cls = ray_worker_group_cls
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

        algo = config.algorithm
        self.kl_ctrl_in_reward = core_algos.get_kl_controller(algo.kl_ctrl) if algo.use_kl_in_reward else None
        self.teacher_wgs: dict[str, Any] = {}  # on-policy distillation: {routing key: teacher worker group}
        self._create_dataloader(train_dataset, val_dataset, collate_fn, train_sampler)

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
        roles.update(teacher_pool.teacher_init_kwargs(cfg, env, self.role_worker_mapping))
        roles = self._role_init_kwargs(roles)
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
            all_wg = self._spawn_ray_worker_groups(roles)

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

    def _role_init_kwargs(self, roles: dict[Role, dict[str, Any]]) -> dict[Role, dict[str, Any]]:
        """Hook: the constructor keywords of each role's worker class, before any worker starts.

        A recipe whose worker takes more than core passes (e.g. ``total_training_steps`` for a reward model
        it trains online) returns an extended copy. Default: unchanged.
        """
        return roles

    def _spawn_ray_worker_groups(self, roles: dict[Role, dict[str, Any]]) -> dict[str, Any]:
        """The resource pools, then one Ray worker group per pool holding its roles (colocated)."""
        rpm = self.resource_pool_manager
        rpm.create_resource_pool()
        pool_to_classes: dict[Any, dict[str, RayClassWithInitArgs]] = {}
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
    def n_workers(self) -> int:
        """Total worker slots over all pools (GPUs, or CPU workers), for throughput per worker."""
        return sum(sum(nodes) for nodes in self.resource_pool_manager.resource_pool_spec.values())

    # -------------------------------------------------------------------------------------- stages
    def _stage_generate(self, batch: DataProto, metrics: dict) -> DataProto:
        """Give each prompt a ``uid``, repeat it ``rollout.n`` times (group rows adjacent), generate."""
        rollout = self.config.actor_rollout_ref.rollout
        batch.non_tensor_batch["uid"] = np.array([str(uuid.uuid4()) for _ in range(len(batch))], dtype=object)
        batch = batch.repeat(repeat_times=rollout.n, interleave=True)
        gen_batch = self._gen_input(batch, do_sample=rollout.do_sample, validate=False)
        output = self.actor_rollout_wg.generate_sequences(gen_batch)
        if self.config.algorithm.adv_estimator == "remax":
            batch.batch["reward_baselines"] = self._greedy_baseline(gen_batch)
        batch.pop(batch_keys=list(_PROMPT_TENSOR_KEYS))
        batch, gen_metrics = merge_outputs(batch, output)
        metrics.update(reduce_metrics(gen_metrics))
        return batch

    def _stage_reward(self, batch: DataProto, metrics: dict) -> DataProto:
        """Model reward (``rm_scores``) when enabled, then the rule reward -> ``token_level_scores``."""
        if self.use_rm:
            batch, rm_metrics = merge_outputs(batch, self.rm_wg.compute_rm_score(batch))
            metrics.update(reduce_metrics(rm_metrics))
        if self.reward_fn is None:
            if not self.use_rm:
                raise ValueError("no reward: pass reward_fn to RayPPOTrainer or enable reward.reward_model")
            batch.batch["token_level_scores"] = batch.batch["rm_scores"]
            return batch
        return self._rule_reward(batch, metrics)

    def _rule_reward(self, batch: DataProto, metrics: dict) -> DataProto:
        """``reward_fn``'s scores -> ``token_level_scores``, its extra columns -> ``non_tensor_batch`` (and the
        means of the numeric ones -> ``reward_extra/<key>/mean``). The rule part of `_stage_reward`, on its own
        for a recipe whose reward model runs in another stage."""
        reward_tensor, extra = compute_reward(batch, self.reward_fn, metrics=metrics)
        batch.batch["token_level_scores"] = reward_tensor
        batch.meta_info[REWARD_EXTRA_KEYS] = sorted(extra)  # for the rollout dump (trainer.rollout_data_dir)
        for key, values in extra.items():
            batch.non_tensor_batch[key] = np.array(values, dtype=object)
            numeric = [float(v) for v in values if isinstance(v, bool | int | float | np.number)]
            if len(numeric) == len(values) and numeric:
                metrics[f"reward_extra/{key}/mean"] = float(np.mean(numeric))
        return batch

    def _stage_filter(self, batch: DataProto, metrics: dict) -> DataProto | None:
        """Hook for dynamic sampling: return the batch to train on, or None to generate more first.

        Returning None makes ``fit`` fetch the next prompt batch and run generate/reward/filter again
        without advancing the step (the override keeps what it accumulated). Default: keep all.
        """
        return batch

    def _stage_old_log_prob(self, batch: DataProto, metrics: dict) -> DataProto:
        """The current policy's log-probs of the sampled tokens (``old_log_probs``) and its entropy.

        With ``actor.use_rollout_log_probs`` or ``algorithm.rollout_correction.bypass_mode`` they are the
        rollout's own ``rollout_log_probs`` (computed while sampling): no forward pass, and the update
        reports the entropy. Otherwise the actor computes them and, with ``rollout_correction.rollout_is``,
        the truncated importance weights pi_old / pi_rollout join the batch as ``rollout_is_weights``
        (the actor's loss multiplies by them; see ``ppo.rollout_corr_helper``).
        """
        correction = self.config.algorithm.rollout_correction
        if self.config.actor_rollout_ref.actor.use_rollout_log_probs or correction.bypass_mode:
            if "rollout_log_probs" not in batch.batch:
                raise KeyError(
                    "actor.use_rollout_log_probs / rollout_correction.bypass_mode is on but the rollout returned "
                    f"no 'rollout_log_probs' (batch keys: {sorted(batch.batch.keys())}); the engine must honour "
                    "rollout.calculate_log_probs"
                )
            batch.batch["old_log_probs"] = batch.batch["rollout_log_probs"]
            return batch
        output = self.actor_rollout_wg.compute_log_prob(batch)
        if "entropys" in output.batch:
            entropys = output.batch.pop("entropys")
            agg = core_algos.agg_loss(entropys, batch.batch["response_mask"], self.config.actor_rollout_ref.actor.loss_agg_mode)
            metrics["actor/entropy"] = float(agg.item())
        batch, lp_metrics = merge_outputs(batch, output)
        metrics.update(reduce_metrics(lp_metrics))
        batch, is_metrics = compute_rollout_correction_and_add_to_batch(batch, correction)
        metrics.update(is_metrics)
        return batch

    def _stage_ref_log_prob(self, batch: DataProto, metrics: dict) -> DataProto:
        if not self.use_reference_policy:
            return batch
        batch, ref_metrics = merge_outputs(batch, self.ref_policy_wg.compute_ref_log_prob(batch))
        metrics.update(reduce_metrics(ref_metrics))
        return batch

    def _stage_values(self, batch: DataProto, metrics: dict) -> DataProto:
        if not self.use_critic:
            return batch
        batch, v_metrics = merge_outputs(batch, self.critic_wg.compute_values(batch))
        metrics.update(reduce_metrics(v_metrics))
        return batch

    def _stage_advantage(self, batch: DataProto, metrics: dict) -> DataProto:
        """KL penalty in the reward when configured, then the registered advantage estimator."""
        algo = self.config.algorithm
        b = batch.batch
        if algo.use_kl_in_reward:
            rewards, kl_metrics = core_algos.compute_kl_in_reward(
                b["token_level_scores"], b["old_log_probs"], b["ref_log_prob"], b["response_mask"],
                self.kl_ctrl_in_reward, kl_penalty=algo.kl_penalty,
            )
            b["token_level_rewards"] = rewards
            metrics.update(kl_metrics)
        else:
            b["token_level_rewards"] = b["token_level_scores"]
        estimator = core_algos.get_adv_estimator_fn(algo.adv_estimator)
        advantages, returns = estimator(
            token_level_rewards=b["token_level_rewards"],
            response_mask=b["response_mask"],
            index=batch.non_tensor_batch["uid"],
            config=algo,
            values=b.get("values"),
            reward_baselines=b.get("reward_baselines"),
        )
        b["advantages"], b["returns"] = advantages, returns
        return batch

    def _stage_update_critic(self, batch: DataProto, metrics: dict) -> DataProto:
        if self.use_critic:
            output = self.critic_wg.update_critic(batch)
            metrics.update(reduce_metrics(output.meta_info.get("metrics", {})))
        return batch

    def _stage_update_actor(self, batch: DataProto, metrics: dict) -> DataProto:
        if self.global_steps > self.config.trainer.critic_warmup:
            output = self.actor_rollout_wg.update_actor(batch)
            metrics.update(reduce_metrics(output.meta_info.get("metrics", {})))
        return batch

    # ------------------------------------------------------------------------------------ one step
    def _train_step(self, batch: DataProto, metrics: dict, timing_raw: dict) -> DataProto | None:
        """One PPO step over a prompt batch; None when the filter asks for more prompts first.

        With ``reward.launch_reward_fn_async`` the reward stage runs in a driver thread while the
        workers compute log-probs and values (they do not need the scores); the filter then runs once the
        scores are in, after those passes, and the batch is balanced before scoring starts.
        """
        batch.meta_info.update(global_steps=self.global_steps, temperature=self.config.actor_rollout_ref.rollout.temperature)
        with marked_timer("gen", timing_raw):
            batch = self._stage_generate(batch, metrics)
        if self.teacher_wgs:  # GKD's on-policy fraction (distillation_loss.lmbda < 1)
            batch = gkd.mix_in_targets(batch, self.tokenizer, self.config, metrics)
        overlap = bool(self.config.reward.launch_reward_fn_async)
        if overlap:
            if self.config.trainer.balance_batch:
                batch = balance_batch(batch, self.actor_rollout_wg.world_size, metrics)
            collect_reward = self._launch_reward(batch, metrics, timing_raw)
        else:
            with marked_timer("reward", timing_raw):
                batch = self._stage_reward(batch, metrics)
            with marked_timer("filter", timing_raw):
                batch = self._stage_filter(batch, metrics)
            if batch is None:
                return None
            if self.config.trainer.balance_batch:
                batch = balance_batch(batch, self.actor_rollout_wg.world_size, metrics)
        batch.meta_info["global_token_num"] = batch.batch["attention_mask"].sum(-1).tolist()
        with marked_timer("old_log_prob", timing_raw):
            batch = self._stage_old_log_prob(batch, metrics)
        with marked_timer("ref", timing_raw):
            batch = self._stage_ref_log_prob(batch, metrics)
        if self.teacher_wgs:
            with marked_timer("teacher", timing_raw):
                batch = teacher_step.compute_teacher_log_probs(batch, self.teacher_wgs, self.config.distillation, metrics)
        with marked_timer("values", timing_raw):
            batch = self._stage_values(batch, metrics)
        if overlap:
            with marked_timer("reward_wait", timing_raw):
                batch = collect_reward(batch)
            with marked_timer("filter", timing_raw):
                batch = self._stage_filter(batch, metrics)
            if batch is None:
                return None
        with marked_timer("adv", timing_raw):
            batch = self._stage_advantage(batch, metrics)
        with marked_timer("update_critic", timing_raw):
            batch = self._stage_update_critic(batch, metrics)
        with marked_timer("update_actor", timing_raw):
            batch = self._stage_update_actor(batch, metrics)
        return batch

    def shutdown(self) -> None:
        """Free this run's Ray resources: removing the pools' placement groups ends the worker processes
        scheduled in them, so the next run in the same Ray session gets its CPUs/GPUs back."""
        for pool in self.resource_pool_manager.resource_pool_dict.values():  # none with the local backend
            pool.remove()

    def fit(self) -> dict[str, float]:
        """Train until ``total_training_steps``; returns the last step's metrics.

        Raises ``NothingToTrainError`` when a resumed checkpoint already reached the last step.
        """
        self.global_steps = 0
        self.check_steps_remaining()  # before touching the workers: fail fast and loudly
        self._load_checkpoint()
        total = self.total_training_steps
        self.logger = self._make_logger()
        last: dict[str, float] = {}
        try:
            if self.val_reward_fn is not None and self.config.trainer.val_before_train:
                val_metrics = self._validate()
                self.logger.log(val_metrics, step=self.global_steps)
                if self.config.trainer.val_only:
                    return val_metrics
            bar = self._progress_bar(initial=self.global_steps, total=total)
            self.global_steps += 1
            while self.global_steps <= total:
                batch_dict = self._next_batch()
                metrics: dict[str, float] = {}
                timing_raw: dict[str, float] = {}
                with marked_timer("step", timing_raw), naming_step(self.global_steps):
                    batch = self._train_step(DataProto.from_single_dict(batch_dict), metrics, timing_raw)
                    if batch is None:
                        continue
                    if self.config.trainer.rollout_data_dir:
                        with marked_timer("dump_rollout", timing_raw):
                            self._dump_rollout_data(batch)
                    is_last = self.global_steps >= total
                    freq = self.config.trainer.test_freq
                    if self.val_reward_fn is not None and freq > 0 and (is_last or self.global_steps % freq == 0):
                        with marked_timer("testing", timing_raw):
                            metrics.update(self._validate())
                    save_freq = self.config.trainer.save_freq
                    if save_freq > 0 and (is_last or self.global_steps % save_freq == 0):
                        with marked_timer("save_checkpoint", timing_raw):
                            self._save_checkpoint()
                metrics["training/global_step"] = self.global_steps
                metrics["training/epoch"] = self.epoch
                metrics.update(compute_data_metrics(batch, use_critic=self.use_critic))
                metrics.update(compute_timing_metrics(batch, timing_raw))
                metrics.update(compute_throughout_metrics(batch, timing_raw, self.n_workers))
                self.logger.log(metrics, step=self.global_steps)
                self._advance_progress(bar, metrics)
                last = metrics
                self.global_steps += 1
            self.global_steps = total  # the loop leaves it one past the last step
            if bar is not None:
                bar.close()
        finally:
            self.logger.finish()
        return last

    def _dump_rollout_data(self, batch: DataProto) -> str:
        """``trainer.rollout_data_dir/{step}.jsonl``: every trained trajectory (see ``ppo.dumps``)."""
        records = rollout_records(batch, self.tokenizer, self.global_steps)
        return write_generations(self.config.trainer.rollout_data_dir, self.global_steps, records)

    def _launch_reward(self, batch: DataProto, metrics: dict, timing_raw: dict) -> Callable[[DataProto], DataProto]:
        """Start ``_stage_reward`` in a thread on a shallow snapshot of ``batch`` (the main thread keeps
        adding keys to the batch meanwhile); the returned function waits and adds what the stage added.
        ``timing_s/reward`` is the scoring time itself, ``timing_s/reward_wait`` what was not hidden."""
        from concurrent.futures import ThreadPoolExecutor

        snapshot = DataProto(
            batch=copy.copy(batch.batch), non_tensor_batch=dict(batch.non_tensor_batch), meta_info=dict(batch.meta_info)
        )
        reward_metrics: dict[str, Any] = {}

        def score() -> DataProto:
            with marked_timer("reward", timing_raw):
                return self._stage_reward(snapshot, reward_metrics)

        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="reward")
        future = pool.submit(score)
        pool.shutdown(wait=False)  # the thread ends with its one task

        def collect(target: DataProto) -> DataProto:
            scored = future.result()  # re-raises the reward function's error here, in the step
            for key in scored.batch.keys() - target.batch.keys():
                target.batch[key] = scored.batch[key]
            for key in scored.non_tensor_batch.keys() - target.non_tensor_batch.keys():
                target.non_tensor_batch[key] = scored.non_tensor_batch[key]
            if REWARD_EXTRA_KEYS in scored.meta_info:
                target.meta_info[REWARD_EXTRA_KEYS] = scored.meta_info[REWARD_EXTRA_KEYS]
            metrics.update(reward_metrics)
            return target

        return collect

    def _greedy_baseline(self, gen_batch: DataProto) -> torch.Tensor:
        """ReMax: the reward of a greedy rollout of each row, one number per row."""
        greedy_in = DataProto(batch=gen_batch.batch, non_tensor_batch=dict(gen_batch.non_tensor_batch), meta_info=dict(gen_batch.meta_info))
        greedy_in.meta_info["do_sample"] = False
        out = self.actor_rollout_wg.generate_sequences(greedy_in)
        scored = DataProto(batch=out.batch, non_tensor_batch=dict(gen_batch.non_tensor_batch), meta_info={})
        reward_tensor, _ = compute_reward(scored, self.reward_fn)
        return reward_tensor.sum(-1)

    def _gen_input(self, batch: DataProto, do_sample: bool, validate: bool) -> DataProto:
        """What the rollout sees: the prompt tensors, every non-tensor (raw prompts, tools...), flags."""
        tensors = batch.batch.select(*_PROMPT_TENSOR_KEYS)
        meta = dict(batch.meta_info, do_sample=do_sample, validate=validate, global_steps=self.global_steps)
        return DataProto(batch=tensors, non_tensor_batch=dict(batch.non_tensor_batch), meta_info=meta)
