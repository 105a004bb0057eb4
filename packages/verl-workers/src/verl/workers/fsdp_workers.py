"""The Ray worker roles of the PPO family (upstream: ``verl.workers.fsdp_workers``).

``ActorRolloutRefWorker`` is the hybrid engine: actor, rollout and reference policy in one process,
which of them is chosen by ``role``. ``CriticWorker`` trains the value model. Both are driven by the
single controller through the ``@register``-ed methods below (names and dispatch modes as upstream;
see docs/contracts.md). Training runs on a training engine from ``verl.registries.TRAINING_ENGINES``
(``actor.strategy``); sampling on a rollout engine from ``ROLLOUT_ENGINES`` (``rollout.name``).

Per-rank batch sizes are derived from the (read-only) config into worker attributes:
``ppo_mini_batch_size_per_rank = ppo_mini_batch_size * rollout.n // dp_size``.

The trainer gives every worker ``device`` (``trainer.device`` resolved once, ``cpu`` or ``cuda``) and
``seed`` (``trainer.seed``); each worker seeds its RNGs with ``seed + rank`` (see :func:`init_distributed`).

Ulysses sequence parallelism (``ulysses_sequence_parallel_size`` = sp): the ranks of one SP group (sp
consecutive ranks) work on the same rows, so the training and log-prob methods dispatch by data-parallel
rank (``rank // sp``; meshes ``actor``, ``ref``, ``critic``) and collect from the group's first rank, as
upstream does; generation still splits over every rank. Per-rank sizes divide by ``world / sp``.
"""

from __future__ import annotations

import os
import shutil
from typing import Any

import torch
import torch.distributed as dist
from verl import DataProto
from verl.single_controller.base.decorator import Dispatch, make_nd_compute_dataproto_dispatch_fn, register
from verl.single_controller.base.worker import Worker
from verl.workers.engine.lora import AdapterDisabledEngine, lora_enabled
from verl.workers.worker_setup import (
    _BUCKET_MB_KEY,
    ROLES,
    _CheckpointKeeper,
    _engine_options,
    _register_sp_mesh,
    _sp_size,
    _with_meta,
    init_distributed,
    per_rank_size,
)

__all__ = ["ActorRolloutRefWorker", "CriticWorker", "init_distributed", "per_rank_size"]


class ActorRolloutRefWorker(Worker):
    """Actor (PPO update), rollout (generation) and reference policy in one process.

    ``config`` is ``cfg.actor_rollout_ref`` (read only); ``role`` is one of ``actor_rollout_ref``,
    ``actor_rollout``, ``actor``, ``rollout``, ``ref``; ``total_training_steps`` sizes the LR schedule.
    The rollout reads the actor's live module when the engine allows (``hf``): every actor update is
    visible to the next generation without a copy. Engines with their own weights get them through the
    bucketed weight sync before the first generation after an update.
    """

    def __init__(
        self, config: Any, role: str, total_training_steps: int | None = None, device: str | None = None,
        seed: int | None = None, distillation_loss: Any = None, **_: Any,
    ):
        super().__init__()
        self.distillation_loss = distillation_loss  # distillation.distillation_loss when OPD is on
        if role not in ROLES:
            raise ValueError(f"unknown ActorRolloutRefWorker role {role!r}; known: {', '.join(ROLES)}")
        self.config = config
        self.role = role
        self.total_training_steps = total_training_steps
        self.device_name, self.seed = device, seed
        self._is_actor = role in ("actor_rollout_ref", "actor_rollout", "actor")
        self._is_rollout = role in ("actor_rollout_ref", "actor_rollout", "rollout")
        self._is_ref = role in ("actor_rollout_ref", "ref")
        self.ppo_mini_batch_size_per_rank: int | None = None
        _register_sp_mesh(self, "actor", _sp_size(config.get("actor")))
        if self._is_ref:  # a worker without the reference leaves its section alone
            _register_sp_mesh(self, "ref", _sp_size(config.get("ref")))
        if self._is_actor:
            self.ppo_mini_batch_size_per_rank = per_rank_size(
                config.actor.ppo_mini_batch_size,
                config.rollout.n,
                self.world_size // _sp_size(config.actor),
                "actor.ppo_mini_batch_size",
            )
        self.actor_engine = self.ref_engine = None
        self.actor = self.ref_policy = self.rollout = None
        self.tokenizer = None
        self._hf_copy = None  # LoRA + a rollout that reads plain HF weights: its merged copy
        self._ckpt = _CheckpointKeeper()
        # Bumped by every actor update; engines with their own weights resync when it moves.
        self._weights_version = 0
        self._rollout_weights_version = -1
        self._rollout_base_synced = False  # rollout.lora_sync=adapter: frozen base weights sent once
        self._rollout_lora_folder: str | None = None  # ... and the folder of the adapter vLLM has

    # ------------------------------------------------------------------ setup
    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self) -> None:
        """Join torch.distributed and build the actor engine, rollout and reference as the role asks."""
        init_distributed(self.device_name, self.seed)
        from verl.workers.actor.dp_actor import DataParallelPPOActor
        from verl.workers.engine import build_engine
        from verl.workers.rollout import build_rollout
        from verl.workers.tokenizer import hf_tokenizer

        cfg = self.config
        if self._is_actor or self._is_rollout:
            actor_cfg = cfg.actor
            self.actor_engine = build_engine(
                actor_cfg.strategy,
                model_config=cfg.model,
                engine_config=actor_cfg.fsdp_config,
                optim_config=actor_cfg.optim if self._is_actor else None,
                model_type="causal_lm",
                grad_clip=actor_cfg.grad_clip,
                total_training_steps=self.total_training_steps,
                checkpoint_config=actor_cfg.checkpoint,
                **_engine_options(
                    actor_cfg, actor_cfg.use_torch_compile, bool(actor_cfg.entropy_checkpointing),
                    run_tokens=self._run_tokens() if self._is_actor else None,
                ),
                # only FSDP engines take it: other engines keep their signature unless it is asked for
                **({"freeze_vision": True} if self._is_actor and actor_cfg.get("freeze_vision_tower") else {}),
            )
            if self._is_actor:
                self.actor = DataParallelPPOActor(
                    actor_cfg,
                    self.actor_engine,
                    ppo_mini_batch_size_per_rank=self.ppo_mini_batch_size_per_rank,
                    distillation_loss=self.distillation_loss,
                )
        if self._is_rollout:
            self.tokenizer = hf_tokenizer(
                cfg.model.tokenizer_path or cfg.model.path,
                trust_remote_code=bool(cfg.model.trust_remote_code),
            )
            self.rollout = build_rollout(
                cfg.rollout.name,
                module=self._rollout_module(),
                config=cfg.rollout,
                tokenizer=self.tokenizer,
                model_config=cfg.model,
                reshard_after_forward=bool(cfg.actor.fsdp_config.reshard_after_forward),
                device=self.actor_engine.device,
                compile=self.actor_engine.compiled,
            )
        if self._is_ref and lora_enabled(cfg.model):
            if self.actor_engine is None:
                raise ValueError(
                    f"with LoRA (actor_rollout_ref.model.lora_rank={cfg.model.lora_rank}) the reference policy is the "
                    f"actor's base model with its adapters disabled; role {self.role!r} has no actor. Use role "
                    f"'actor_rollout_ref'"
                )
            self.ref_engine = AdapterDisabledEngine(self.actor_engine)  # no second copy of the weights
            self.ref_policy = DataParallelPPOActor(cfg.ref, self.ref_engine)
        elif self._is_ref:
            self.ref_engine = build_engine(
                cfg.ref.strategy,
                model_config=cfg.model,
                engine_config=cfg.ref.fsdp_config,
                optim_config=None,
                model_type="causal_lm",
                **_engine_options(cfg.ref),
            )
            self.ref_policy = DataParallelPPOActor(cfg.ref, self.ref_engine)

    def _run_tokens(self) -> int | None:
        """Tokens the actor trains on over the run, at least (``use_torch_compile=null`` weighs them
        against the compile time): steps x one mini-batch of trajectories x prompt + response length x
        PPO epochs (a train batch of several mini-batches only adds to it)."""
        if self.total_training_steps is None:
            return None
        cfg = self.config
        rows = int(cfg.actor.ppo_mini_batch_size) * int(cfg.rollout.n)
        length = int(cfg.rollout.prompt_length) + int(cfg.rollout.response_length)
        return int(self.total_training_steps) * rows * length * int(cfg.actor.ppo_epochs)

    def _rollout_module(self) -> torch.nn.Module:
        """What the rollout samples from: the actor's live module, or with LoRA and an engine that reads
        the trainer's module (``hf``, ``native``) a plain HF copy that receives the merged weights after
        every update (the decode loops read plain HF weights, not peft's base + adapter layers)."""
        from verl.workers.rollout.base import get_rollout_class

        engine = self.actor_engine
        if engine.lora is None or not get_rollout_class(self.config.rollout.name).shares_trainer_weights:
            return engine.module
        from verl.workers.engine.hf_model import load_hf_model
        from verl.workers.rollout.weight_sync import HFWeightCopy

        module = load_hf_model(self.config.model, "causal_lm", engine.precision.param_dtype).to(engine.device)
        module.requires_grad_(False)
        self._hf_copy = HFWeightCopy(module)
        return module

    @property
    def actor_module(self) -> torch.nn.Module:
        """The actor's (wrapped) module: the one the ``hf`` rollout samples from."""
        return self.actor_engine.module

    def _sync_rollout_weights(self) -> None:
        """Push the actor's current weights (HF names; LoRA merged in) to a rollout engine that keeps its
        own copy, or to the LoRA run's HF copy (collective)."""
        target = self._hf_copy if self._hf_copy is not None else self.rollout
        if target is self.rollout and self.rollout.shares_trainer_weights:
            return
        if self._rollout_weights_version == self._weights_version:
            return
        from verl.workers.rollout.weight_sync import sync_weights

        bucket_mb = int(dict(self.config.rollout.engine_kwargs or {}).get(_BUCKET_MB_KEY, 512))
        if target is self.rollout and self.config.rollout.lora_sync == "adapter":
            self._sync_rollout_adapter(bucket_mb << 20)
        elif self.config.rollout.layered_summon:  # one decoder layer gathered at a time (LoRA merged per layer)
            from verl.workers.engine.layered import iter_layered_hf_state

            sync_weights(iter_layered_hf_state(self.actor_engine), target, bucket_mb << 20)
        else:
            sync_weights(self.actor_engine.hf_state_dict().items(), target, bucket_mb << 20)
        self._rollout_weights_version = self._weights_version

    def _sync_rollout_adapter(self, bucket_bytes: int) -> None:
        """vLLM's LoRA path (``rollout.lora_sync=adapter``): the frozen base weights once (unless vLLM
        loaded them from disk: ``load_format`` other than dummy), then the adapter alone, written as a
        peft folder (a temporary directory per rank) that vLLM loads (collective gather)."""
        import shutil
        import tempfile

        from verl.workers.engine.lora import save_adapter, unwrap_peft
        from verl.workers.rollout.weight_sync import sync_weights

        engine = self.actor_engine
        state = engine.full_state_dict()
        if not self._rollout_base_synced and self.config.rollout.load_format == "dummy":
            sync_weights(engine.lora.merge(state, adapters=False).items(), self.rollout, bucket_bytes)
        self._rollout_base_synced = True
        folder = tempfile.mkdtemp(prefix="verl_lora_")
        try:
            self.rollout.load_lora_adapter(save_adapter(unwrap_peft(engine.module), state, folder))
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        # vLLM may read the folder again (after a weight reload it loads the adapter anew): it lives until
        # the next adapter replaces it
        if self._rollout_lora_folder is not None:
            shutil.rmtree(self._rollout_lora_folder, ignore_errors=True)
        self._rollout_lora_folder = folder

    # ------------------------------------------------------------------ rollout
    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def generate_sequences(self, prompts: DataProto) -> DataProto:
        """One response per prompt row: ``prompts``, ``responses``, ``response_mask``, ``input_ids``,
        ``attention_mask``, ``position_ids`` (+ ``rollout_log_probs`` with ``rollout.calculate_log_probs``)."""
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

    # ------------------------------------------------------------------ log-probs
    @register(dispatch_mode=make_nd_compute_dataproto_dispatch_fn("actor"))
    def compute_log_prob(self, data: DataProto) -> DataProto:
        """``old_log_probs`` and ``entropys`` [N, R] of ``responses`` under the current actor."""
        if not self._is_actor:
            raise RuntimeError(f"compute_log_prob needs the actor; this worker's role is {self.role!r}")
        rollout_cfg = self.config.rollout
        data = _with_meta(
            data,
            micro_batch_size=rollout_cfg.log_prob_micro_batch_size_per_gpu,
            temperature=data.meta_info.get("temperature", rollout_cfg.temperature),
        )
        log_probs, entropys = self.actor.compute_log_prob(data, calculate_entropy=True)
        return DataProto.from_dict(
            tensors={"old_log_probs": log_probs, "entropys": entropys},
            meta_info={"temperature": data.meta_info["temperature"]},
        )

    @register(dispatch_mode=make_nd_compute_dataproto_dispatch_fn("ref"))
    def compute_ref_log_prob(self, data: DataProto) -> DataProto:
        """``ref_log_prob`` [N, R] of ``responses`` under the frozen reference policy."""
        if not self._is_ref:
            raise RuntimeError(
                f"compute_ref_log_prob needs the reference policy; this worker's role is {self.role!r}"
            )
        data = _with_meta(
            data,
            micro_batch_size=self.config.ref.log_prob_micro_batch_size_per_gpu,
            temperature=data.meta_info.get("temperature", self.config.rollout.temperature),
        )
        log_probs, _ = self.ref_policy.compute_log_prob(data, calculate_entropy=False)
        return DataProto.from_dict(tensors={"ref_log_prob": log_probs})

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def refresh_ref_from_actor(self) -> None:
        """Give the reference policy the actor's current weights (collective; role ``actor_rollout_ref``).

        For algorithms whose reference is the previous iterate rather than the initial model (iterative
        DPO / SPIN refresh it every ``trainer.ref_update_freq`` steps). The actor is left as it is.
        """
        if not (self._is_actor and self._is_ref):
            raise RuntimeError(
                f"refresh_ref_from_actor needs the actor and the reference in one worker (role "
                f"'actor_rollout_ref'); this worker's role is {self.role!r}"
            )
        if self.actor_engine.lora is not None:
            raise ValueError(
                "refresh_ref_from_actor with LoRA: the reference is the actor's base model (adapters disabled); "
                "it cannot take the trained adapters. Train without LoRA (lora_rank=0) when the reference must follow the actor"
            )
        self.ref_engine.load_full_state_dict(self.actor_engine.full_state_dict())

    # ------------------------------------------------------------------ update
    @register(dispatch_mode=make_nd_compute_dataproto_dispatch_fn("actor"))
    def update_actor(self, data: DataProto) -> DataProto:
        """One PPO step over this rank's rows; returns ``meta_info={"metrics": {...}}``."""
        if not self._is_actor:
            raise RuntimeError(f"update_actor needs the actor; this worker's role is {self.role!r}")
        data = _with_meta(
            data, temperature=data.meta_info.get("temperature", self.config.rollout.temperature)
        )
        metrics = self.actor.update_policy(data)
        self._weights_version += 1
        return DataProto(meta_info={"metrics": metrics})

    # ------------------------------------------------------------------ checkpoints
    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def save_checkpoint(
        self,
        local_path: str,
        global_step: int = 0,
        max_ckpt_to_keep: int | None = None,
        hdfs_path: str | None = None,
    ) -> None:
        """Save the actor's model, optimizer, LR schedule and RNG (sharded) to ``local_path``; keep at
        most ``max_ckpt_to_keep`` of this worker's checkpoints (oldest deleted)."""
        if not self._is_actor:
            raise RuntimeError(f"save_checkpoint saves the actor; this worker's role is {self.role!r}")
        if hdfs_path is not None:
            raise NotImplementedError(f"hdfs_path={hdfs_path!r}: remote checkpoint copies are not supported")
        self.actor_engine.save_checkpoint(local_path, global_step=global_step)
        if self.rollout is not None and self.rollout.generator is not None:
            torch.save(self.rollout.generator.get_state(), self._rollout_rng_file(local_path))
        self._ckpt.saved_and_prune(local_path, max_ckpt_to_keep)

    @staticmethod
    def _rollout_rng_file(local_path: str) -> str:
        return os.path.join(local_path, f"rollout_rng_rank_{dist.get_rank()}.pt")

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def load_checkpoint(
        self, local_path: str, hdfs_path: str | None = None, del_local_after_load: bool = False
    ) -> None:
        """Load what :meth:`save_checkpoint` wrote; the rollout sees the loaded weights."""
        if not self._is_actor:
            raise RuntimeError(f"load_checkpoint loads the actor; this worker's role is {self.role!r}")
        self.actor_engine.load_checkpoint(local_path)
        rng_file = self._rollout_rng_file(local_path)
        if self.rollout is not None and self.rollout.generator is not None and os.path.isfile(rng_file):
            # absent for ranks the saving run did not have: those keep sampling from rollout.seed + rank
            self.rollout.generator.set_state(torch.load(rng_file))
        self._weights_version += 1
        if del_local_after_load and dist.get_rank() == 0:
            shutil.rmtree(local_path, ignore_errors=True)


class CriticWorker(Worker):
    """The value model. ``config`` is ``cfg.critic`` (read only)."""

    def __init__(
        self, config: Any, total_training_steps: int | None = None, device: str | None = None,
        seed: int | None = None, **_: Any,
    ):
        super().__init__()
        self.config = config
        self.total_training_steps = total_training_steps
        self.device_name, self.seed = device, seed
        _register_sp_mesh(self, "critic", _sp_size(config))
        self.ppo_mini_batch_size_per_rank = per_rank_size(
            config.ppo_mini_batch_size, config.rollout_n, self.world_size // _sp_size(config),
            "critic.ppo_mini_batch_size",
        )
        self.engine = None
        self.critic = None
        self._ckpt = _CheckpointKeeper()

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self) -> None:
        """Join torch.distributed and build the value model (backbone + scalar head) and its optimizer."""
        init_distributed(self.device_name, self.seed)
        from verl.workers.critic.dp_critic import DataParallelPPOCritic
        from verl.workers.engine import build_engine

        cfg = self.config
        self.engine = build_engine(
            cfg.strategy,
            model_config=cfg.model,
            engine_config=cfg.model.fsdp_config,
            optim_config=cfg.optim,
            model_type="value",
            grad_clip=cfg.grad_clip,
            total_training_steps=self.total_training_steps,
            checkpoint_config=cfg.checkpoint,
            **_engine_options(cfg),
        )
        self.critic = DataParallelPPOCritic(
            cfg, self.engine, ppo_mini_batch_size_per_rank=self.ppo_mini_batch_size_per_rank
        )

    @register(dispatch_mode=make_nd_compute_dataproto_dispatch_fn("critic"))
    def compute_values(self, data: DataProto) -> DataProto:
        """``values`` [N, R]: the value of the state before each response token (0 outside the mask)."""
        data = _with_meta(data, micro_batch_size=self.config.forward_micro_batch_size_per_gpu)
        return DataProto.from_dict(tensors={"values": self.critic.compute_values(data)})

    @register(dispatch_mode=make_nd_compute_dataproto_dispatch_fn("critic"))
    def update_critic(self, data: DataProto) -> DataProto:
        """One value-model step over this rank's rows; returns ``meta_info={"metrics": {...}}``."""
        return DataProto(meta_info={"metrics": self.critic.update_critic(data)})

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def save_checkpoint(
        self,
        local_path: str,
        global_step: int = 0,
        max_ckpt_to_keep: int | None = None,
        hdfs_path: str | None = None,
    ) -> None:
        if hdfs_path is not None:
            raise NotImplementedError(f"hdfs_path={hdfs_path!r}: remote checkpoint copies are not supported")
        self.engine.save_checkpoint(local_path, global_step=global_step)
        self._ckpt.saved_and_prune(local_path, max_ckpt_to_keep)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def load_checkpoint(
        self, local_path: str, hdfs_path: str | None = None, del_local_after_load: bool = False
    ) -> None:
        self.engine.load_checkpoint(local_path)
        if del_local_after_load and dist.get_rank() == 0:
            shutil.rmtree(local_path, ignore_errors=True)
