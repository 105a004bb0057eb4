"""The Ray worker roles on the Megatron engine (upstream: ``verl.workers.megatron_workers``).

Same roles, methods and losses as :mod:`verl.workers.fsdp_workers` (the PPO actor and critic of
``verl.workers.actor`` / ``verl.workers.critic`` over ``strategy=megatron`` engines); what differs is
where data goes. A worker is one rank of a tensor x pipeline x data-parallel layout
(``*.megatron.*_parallel_size``), so the training and log-prob methods use
``Dispatch.MEGATRON_COMPUTE_PROTO``: each data-parallel rank's rows go to all of its tensor/pipeline
ranks and the result is collected from the last pipeline stage's tensor rank 0. Per-rank mini-batches
divide by the data-parallel size.

Rollout: the ``hf`` / ``native`` engines run a Hugging Face module, so the actor's worker keeps an HF
copy of the policy on every rank, loaded from ``model.path`` and, after each actor update, refreshed
from the Megatron shards (gathered to HF names, :meth:`MegatronEngine.full_state_dict`) through the
bucketed weight sync (:mod:`verl.workers.rollout.weight_sync`). Every rank generates its own share of
the prompts (``Dispatch.DP_COMPUTE_PROTO``).
"""

from __future__ import annotations

import shutil
from typing import Any

import torch.distributed as dist
from verl import DataProto
from verl.single_controller.base.decorator import Dispatch, register
from verl.single_controller.base.megatron import DistGlobalInfo, DistRankInfo, MegatronWorker
from verl.workers.rollout.weight_sync import HFWeightCopy
from verl.workers.worker_setup import (
    _BUCKET_MB_KEY,
    ROLES,
    _CheckpointKeeper,
    _with_meta,
    init_distributed,
    per_rank_size,
)


def _data_parallel_size(megatron_config: Any, world_size: int) -> int:
    from verl.workers.engine.megatron.parallel import parallel_sizes

    return parallel_sizes(megatron_config, world_size).dp


class _MegatronRole(MegatronWorker):
    def _declare_layout(self, engine) -> None:
        r = engine.rank
        self._register_megatron_rank_info(
            DistRankInfo(tp_rank=r.tp_rank, dp_rank=r.dp_rank, pp_rank=r.pp_rank, cp_rank=r.cp_rank),
            DistGlobalInfo(tp_size=r.tp_size, dp_size=r.dp_size, pp_size=r.pp_size, cp_size=r.cp_size),
        )


class ActorRolloutRefWorker(_MegatronRole):
    """Actor, rollout and reference policy on Megatron engines; ``config`` is ``cfg.actor_rollout_ref``,
    ``role`` one of ``actor_rollout_ref``, ``actor_rollout``, ``actor``, ``rollout``, ``ref``."""

    def __init__(
        self, config: Any, role: str, total_training_steps: int | None = None, device: str | None = None,
        seed: int | None = None, **_: Any,
    ):
        super().__init__()
        self.device_name, self.seed = device, seed  # trainer.device resolved; trainer.seed (+ rank)
        if role not in ROLES:
            raise ValueError(f"unknown ActorRolloutRefWorker role {role!r}; known: {', '.join(ROLES)}")
        self.config = config
        self.role = role
        self.total_training_steps = total_training_steps
        self._is_actor = role in ("actor_rollout_ref", "actor_rollout", "actor")
        self._is_rollout = role in ("actor_rollout_ref", "actor_rollout", "rollout")
        self._is_ref = role in ("actor_rollout_ref", "ref")
        self.ppo_mini_batch_size_per_rank: int | None = None
        if self._is_actor:
            dp = _data_parallel_size(config.actor.megatron, self.world_size)
            self.ppo_mini_batch_size_per_rank = per_rank_size(
                config.actor.ppo_mini_batch_size, config.rollout.n, dp, "actor.ppo_mini_batch_size"
            )
        self.actor_engine = self.ref_engine = None
        self.actor = self.ref_policy = self.rollout = None
        self.tokenizer = None
        self._hf_copy: HFWeightCopy | None = None
        self._ckpt = _CheckpointKeeper()
        self._weights_version = 0
        self._rollout_weights_version = 0  # the HF copy starts from model.path, as the actor does

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self) -> None:
        """Join torch.distributed, build the Megatron engines (actor / reference) and the rollout's HF copy."""
        init_distributed(self.device_name, self.seed)
        from verl.workers.actor.dp_actor import DataParallelPPOActor
        from verl.workers.engine import build_engine
        from verl.workers.engine.hf_model import load_hf_model
        from verl.workers.rollout import build_rollout
        from verl.workers.tokenizer import hf_tokenizer

        cfg = self.config
        if self._is_actor or self._is_rollout:
            self.actor_engine = build_engine(
                "megatron",
                model_config=cfg.model,
                engine_config=cfg.actor.megatron,
                optim_config=cfg.actor.optim if self._is_actor else None,
                model_type="causal_lm",
                grad_clip=cfg.actor.grad_clip,
                total_training_steps=self.total_training_steps,
                checkpoint_config=cfg.actor.checkpoint,
            )
            self._declare_layout(self.actor_engine)
            if self._is_actor:
                self.actor = DataParallelPPOActor(
                    cfg.actor, self.actor_engine, ppo_mini_batch_size_per_rank=self.ppo_mini_batch_size_per_rank
                )
        if self._is_rollout:
            self.tokenizer = hf_tokenizer(
                cfg.model.tokenizer_path or cfg.model.path, trust_remote_code=bool(cfg.model.trust_remote_code)
            )
            module = load_hf_model(cfg.model, "causal_lm", self.actor_engine.dtype).to(self.actor_engine.device)
            module.requires_grad_(False)
            self._hf_copy = HFWeightCopy(module)
            self.rollout = build_rollout(
                cfg.rollout.name, module=module, config=cfg.rollout, tokenizer=self.tokenizer,
                device=self.actor_engine.device,
            )
        if self._is_ref:
            self.ref_engine = build_engine(
                "megatron", model_config=cfg.model, engine_config=cfg.ref.megatron, optim_config=None,
                model_type="causal_lm",
            )
            self._declare_layout(self.ref_engine)
            self.ref_policy = DataParallelPPOActor(cfg.ref, self.ref_engine)

    def _sync_rollout_weights(self) -> None:
        """Refresh the HF copy from the Megatron shards after an update (collective over all ranks)."""
        if self._rollout_weights_version == self._weights_version:
            return
        from verl.workers.rollout.weight_sync import sync_weights

        bucket_mb = int(dict(self.config.rollout.engine_kwargs or {}).get(_BUCKET_MB_KEY, 512))
        sync_weights(self.actor_engine.full_state_dict().items(), self._hf_copy, bucket_mb << 20)
        self._rollout_weights_version = self._weights_version

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def generate_sequences(self, prompts: DataProto) -> DataProto:
        """One response per prompt row, from this rank's HF copy of the current policy."""
        if not self._is_rollout:
            raise RuntimeError(f"generate_sequences needs a rollout; this worker's role is {self.role!r}")
        self._sync_rollout_weights()
        self.rollout.resume()
        try:
            return self.rollout.generate_sequences(prompts)
        finally:
            # meta_info["more_chunks"]: the reward loop's next chunk of this round follows (no training in
            # between), so the engine keeps its memory instead of sleeping and waking once per chunk
            if not prompts.meta_info.get("more_chunks", False):
                self.rollout.release()

    @register(dispatch_mode=Dispatch.MEGATRON_COMPUTE_PROTO)
    def compute_log_prob(self, data: DataProto) -> DataProto:
        """``old_log_probs`` and ``entropys`` [N, R] of ``responses`` under the current actor."""
        if not self._is_actor:
            raise RuntimeError(f"compute_log_prob needs the actor; this worker's role is {self.role!r}")
        rollout_cfg = self.config.rollout
        data = _with_meta(
            data, micro_batch_size=rollout_cfg.log_prob_micro_batch_size_per_gpu,
            temperature=data.meta_info.get("temperature", rollout_cfg.temperature),
        )
        log_probs, entropys = self.actor.compute_log_prob(data, calculate_entropy=True)
        return DataProto.from_dict(
            tensors={"old_log_probs": log_probs, "entropys": entropys},
            meta_info={"temperature": data.meta_info["temperature"]},
        )

    @register(dispatch_mode=Dispatch.MEGATRON_COMPUTE_PROTO)
    def compute_ref_log_prob(self, data: DataProto) -> DataProto:
        """``ref_log_prob`` [N, R] of ``responses`` under the frozen reference policy."""
        if not self._is_ref:
            raise RuntimeError(f"compute_ref_log_prob needs the reference policy; this worker's role is {self.role!r}")
        data = _with_meta(
            data, micro_batch_size=self.config.ref.log_prob_micro_batch_size_per_gpu,
            temperature=data.meta_info.get("temperature", self.config.rollout.temperature),
        )
        log_probs, _ = self.ref_policy.compute_log_prob(data, calculate_entropy=False)
        return DataProto.from_dict(tensors={"ref_log_prob": log_probs})

    @register(dispatch_mode=Dispatch.MEGATRON_COMPUTE_PROTO)
    def update_actor(self, data: DataProto) -> DataProto:
        """One PPO step over this data-parallel rank's rows; returns ``meta_info={"metrics": {...}}``."""
        if not self._is_actor:
            raise RuntimeError(f"update_actor needs the actor; this worker's role is {self.role!r}")
        data = _with_meta(data, temperature=data.meta_info.get("temperature", self.config.rollout.temperature))
        metrics = self.actor.update_policy(data)
        self._weights_version += 1
        return DataProto(meta_info={"metrics": metrics})

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def save_checkpoint(self, local_path: str, global_step: int = 0, max_ckpt_to_keep: int | None = None,
                        hdfs_path: str | None = None) -> None:
        """Save the actor (Megatron distributed checkpoint) to ``local_path``; keep at most
        ``max_ckpt_to_keep`` of this worker's checkpoints."""
        if not self._is_actor:
            raise RuntimeError(f"save_checkpoint saves the actor; this worker's role is {self.role!r}")
        if hdfs_path is not None:
            raise NotImplementedError(f"hdfs_path={hdfs_path!r}: remote checkpoint copies are not supported")
        self.actor_engine.save_checkpoint(local_path, global_step=global_step)
        self._ckpt.saved_and_prune(local_path, max_ckpt_to_keep)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def load_checkpoint(self, local_path: str, hdfs_path: str | None = None, del_local_after_load: bool = False) -> None:
        """Load what :meth:`save_checkpoint` wrote; the rollout's copy follows before the next generation."""
        if not self._is_actor:
            raise RuntimeError(f"load_checkpoint loads the actor; this worker's role is {self.role!r}")
        self.actor_engine.load_checkpoint(local_path)
        self._weights_version += 1
        if del_local_after_load and dist.get_rank() == 0:
            shutil.rmtree(local_path, ignore_errors=True)


class CriticWorker(_MegatronRole):
    """The value model on a Megatron engine. ``config`` is ``cfg.critic`` (read only)."""

    def __init__(
        self, config: Any, total_training_steps: int | None = None, device: str | None = None,
        seed: int | None = None, **_: Any,
    ):
        super().__init__()
        self.device_name, self.seed = device, seed
        self.config = config
        self.total_training_steps = total_training_steps
        dp = _data_parallel_size(config.megatron, self.world_size)
        self.ppo_mini_batch_size_per_rank = per_rank_size(
            config.ppo_mini_batch_size, config.rollout_n, dp, "critic.ppo_mini_batch_size"
        )
        self.engine = None
        self.critic = None
        self._ckpt = _CheckpointKeeper()

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self) -> None:
        """Join torch.distributed and build the value model (GPT backbone + HF ``score`` head) and optimizer."""
        init_distributed(self.device_name, self.seed)
        from verl.workers.critic.dp_critic import DataParallelPPOCritic
        from verl.workers.engine import build_engine

        cfg = self.config
        self.engine = build_engine(
            "megatron", model_config=cfg.model, engine_config=cfg.megatron, optim_config=cfg.optim,
            model_type="value", grad_clip=cfg.grad_clip, total_training_steps=self.total_training_steps,
            checkpoint_config=cfg.checkpoint,
        )
        self._declare_layout(self.engine)
        self.critic = DataParallelPPOCritic(cfg, self.engine, ppo_mini_batch_size_per_rank=self.ppo_mini_batch_size_per_rank)

    @register(dispatch_mode=Dispatch.MEGATRON_COMPUTE_PROTO)
    def compute_values(self, data: DataProto) -> DataProto:
        """``values`` [N, R]: the value of the state before each response token (0 outside the mask)."""
        data = _with_meta(data, micro_batch_size=self.config.forward_micro_batch_size_per_gpu)
        return DataProto.from_dict(tensors={"values": self.critic.compute_values(data)})

    @register(dispatch_mode=Dispatch.MEGATRON_COMPUTE_PROTO)
    def update_critic(self, data: DataProto) -> DataProto:
        """One value-model step over this data-parallel rank's rows; returns ``meta_info={"metrics": {...}}``."""
        return DataProto(meta_info={"metrics": self.critic.update_critic(data)})

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def save_checkpoint(self, local_path: str, global_step: int = 0, max_ckpt_to_keep: int | None = None,
                        hdfs_path: str | None = None) -> None:
        if hdfs_path is not None:
            raise NotImplementedError(f"hdfs_path={hdfs_path!r}: remote checkpoint copies are not supported")
        self.engine.save_checkpoint(local_path, global_step=global_step)
        self._ckpt.saved_and_prune(local_path, max_ckpt_to_keep)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def load_checkpoint(self, local_path: str, hdfs_path: str | None = None, del_local_after_load: bool = False) -> None:
        self.engine.load_checkpoint(local_path)
        if del_local_after_load and dist.get_rank() == 0:
            shutil.rmtree(local_path, ignore_errors=True)
