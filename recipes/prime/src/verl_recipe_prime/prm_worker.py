"""``PRIMERewardModelWorker``: the implicit PRM as one Ray worker role that trains and scores.

Registered in ``verl.registries.WORKER_CLASSES`` as ``prime_reward_model`` when this module is imported
(the recipe's ``verl.plugins`` entry point imports it). The trainer maps ``Role.RewardModel`` to it; it
runs colocated with the actor in the shared pool, or on a pool of its own with
``reward.reward_model.enable_resource_pool`` (``nnodes`` x ``n_gpus_per_node`` workers).

Driven by the single controller through (upstream's method names):

- ``init_model()`` (ONE_TO_ALL): join torch.distributed, build the PRM (with its own optimizer and LR
  schedule, ``reward_model.model.optim``) and the frozen reference, both from ``reward_model.model.path``;
- ``compute_rm_score(data)`` / ``update_rm(data)`` (DP_COMPUTE_PROTO): ``prm_log_ratio`` [N, R]
  (see `DataParallelPRIMERewardModel`), ``update_rm`` training first;
- ``save_checkpoint(local_path, global_step, max_ckpt_to_keep)`` / ``load_checkpoint(local_path)``
  (ONE_TO_ALL): the PRM's model, optimizer, LR schedule and RNG (the trainer puts them in ``reward/``
  of each ``global_step_N`` and resumes them with the actor). The reference is the initial model and
  is rebuilt from ``model.path``, so it is not saved.
"""

from __future__ import annotations

import os
import shutil
from typing import Any

import torch.distributed as dist
from verl import DataProto
from verl.registries import WORKER_CLASSES
from verl.single_controller.base.decorator import Dispatch, register
from verl.single_controller.base.worker import Worker

WORKER_NAME = "prime_reward_model"


def prm_mini_batch_size_per_rank(mini_batch_size: int, dp_size: int) -> int:
    """``reward_model.mini_batch_size`` (trajectories, as upstream) split over the PRM's workers."""
    if int(mini_batch_size) <= 0 or int(mini_batch_size) % dp_size:
        raise ValueError(
            f"reward.reward_model.mini_batch_size={mini_batch_size} trajectories must be a positive multiple of "
            f"the {dp_size} PRM workers"
        )
    return int(mini_batch_size) // dp_size


class PRIMERewardModelWorker(Worker):
    """The implicit PRM role. ``config`` is ``reward.reward_model`` (read only); ``total_training_steps``
    sizes the PRM's LR schedule (the trainer passes it, as it does to the actor)."""

    def __init__(
        self,
        config: Any,
        total_training_steps: int | None = None,
        device: str | None = None,
        seed: int | None = None,
        **_: Any,
    ):
        super().__init__()
        self.config = config
        self.device_name, self.seed = device, seed  # trainer.device resolved; trainer.seed (+ rank)
        self.total_training_steps = total_training_steps
        self.mini_batch_size_per_rank = prm_mini_batch_size_per_rank(config.mini_batch_size, self.world_size)
        self.prm = None

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self) -> None:
        """Build the trained PRM engine and the frozen reference engine (same checkpoint)."""
        from verl.workers.engine import build_engine
        from verl.workers.fsdp_workers import init_distributed

        from verl_recipe_prime.prm import DataParallelPRIMERewardModel

        init_distributed(self.device_name, self.seed)
        cfg = self.config
        model = cfg.model
        rm_engine = build_engine(
            cfg.strategy,
            model_config=model,
            engine_config=model.fsdp_config,
            optim_config=model.optim,
            model_type="causal_lm",
            grad_clip=model.optim.grad_clip,
            total_training_steps=self.total_training_steps,
        )
        ref_engine = build_engine(
            cfg.strategy,
            model_config=model,
            engine_config=model.fsdp_config,
            optim_config=None,
            model_type="causal_lm",
        )
        self.prm = DataParallelPRIMERewardModel(
            cfg, rm_engine, ref_engine, mini_batch_size_per_rank=self.mini_batch_size_per_rank
        )

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def compute_rm_score(self, data: DataProto) -> DataProto:
        """``prm_log_ratio`` [N, R] under the PRM as it is now (no training)."""
        return DataProto.from_dict(tensors={"prm_log_ratio": self.prm.compute_rm_score(data)})

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def update_rm(self, data: DataProto) -> DataProto:
        """Train on the rows' outcome labels (``acc``); ``prm_log_ratio`` from the training forwards and
        ``meta_info["metrics"]``."""
        q, metrics = self.prm.update_rm(data)
        return DataProto.from_dict(tensors={"prm_log_ratio": q}, meta_info={"metrics": metrics})

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def save_checkpoint(
        self,
        local_path: str,
        global_step: int = 0,
        max_ckpt_to_keep: int | None = None,
        hdfs_path: str | None = None,
    ) -> None:
        """The PRM's model, optimizer, LR schedule and RNG to ``local_path`` (sharded, collective). Pruning
        old checkpoints is the driver's (``max_ckpt_to_keep`` other than None is refused)."""
        if hdfs_path is not None:
            raise NotImplementedError(f"hdfs_path={hdfs_path!r}: remote checkpoint copies are not supported")
        if max_ckpt_to_keep is not None:
            raise NotImplementedError(
                "the PRM worker does not prune checkpoints; the trainer prunes whole steps"
            )
        self.prm.rm_engine.save_checkpoint(local_path, global_step=global_step)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def load_checkpoint(
        self, local_path: str, hdfs_path: str | None = None, del_local_after_load: bool = False
    ) -> None:
        """Load what `save_checkpoint` wrote into the PRM (the reference stays the initial model)."""
        if hdfs_path is not None:
            raise NotImplementedError(f"hdfs_path={hdfs_path!r}: remote checkpoint copies are not supported")
        self.prm.rm_engine.load_checkpoint(local_path)
        if del_local_after_load and dist.get_rank() == 0:
            shutil.rmtree(os.path.abspath(local_path), ignore_errors=True)


WORKER_CLASSES.register(WORKER_NAME, PRIMERewardModelWorker)
