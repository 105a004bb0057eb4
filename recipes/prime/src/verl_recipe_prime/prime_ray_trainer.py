"""``RayPRIMETrainer``: core's PPO pipeline with PRIME's stages; the loop itself is core's.

One step (core's pipeline), with the stages this class replaces marked * and the one it adds marked +:

    gen (data.gen_batch_size = train_batch_size x oversample_factor prompts, rollout.n answers each)
    -> reward*      rule reward only; its sum over the answer is the outcome label ``acc``
    -> filter*      accuracy band + downsample to train_batch_size groups (``filtering``)
    -> balance -> old_log_prob -> ref (when a KL loss needs it)
    -> prm+         the implicit PRM (``update`` before: train, then score; after: score in the training
                    forward; none: score only) -> implicit process rewards (with reward.reward_model.enable)
    -> adv*         PRIME's RLOO advantage over the outcome and the process rewards
    -> update_actor

Also: the PRM worker gets ``total_training_steps`` (``role_init_kwargs``), its state is saved in
``reward/`` of every checkpoint and resumed with the rest (``save/load_worker_checkpoints``), and
validation adds the PRM's accuracy on held-out outcome labels (``validate``).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import torch
from verl.protocol import DataProto
from verl.trainer.ppo.metric_utils import reduce_metrics
from verl.trainer.ppo.pipeline import Pipeline, Stage
from verl.trainer.ppo.ray_trainer import RayPPOTrainer, Role

from verl_recipe_prime.filtering import accuracy_band_filter
from verl_recipe_prime.prime_core_algos import (
    compute_dpo_abs_accuracy,
    compute_dpo_accuracy,
    compute_prime_rloo_advantage,
    implicit_process_reward,
    prime_norm,
    sequence_log_ratio,
)

PRM_CHECKPOINT_DIR = "reward"  # upstream's folder name inside global_step_N


def outcome_labels(token_level_scores: torch.Tensor) -> torch.Tensor:
    """Each answer's outcome label ``acc`` [N]: its rule reward summed over the response."""
    return token_level_scores.sum(dim=-1).float()


class RayPRIMETrainer(RayPPOTrainer):
    """RayPPOTrainer + PRIME (see the module doc). Metrics per step: ``prime/all_acc/mean`` (outcome
    accuracy of everything generated, before the filter), ``prime/{groups,passed_groups,passed_group_ratio,
    kept_failing_groups}``; from the PRM ``reward_model/{dpo_loss,grad_norm,reward,raw_reward,dpo_acc,
    dpo_acc_before,abs_acc}`` and ``rm/lr``; at validation ``val-prm/{acc,pair_acc,positive_rate}``."""

    # ------------------------------------------------------------------------------------ workers
    def role_init_kwargs(self, roles: dict[Role, dict[str, Any]]) -> dict[Role, dict[str, Any]]:
        roles = {role: dict(kwargs) for role, kwargs in roles.items()}
        if Role.RewardModel in roles:  # the PRM trains: its LR schedule needs the step count
            roles[Role.RewardModel]["total_training_steps"] = self.total_training_steps
        return roles

    def save_worker_checkpoints(self, ckpt_dir: str) -> None:
        super().save_worker_checkpoints(ckpt_dir)
        if self.use_rm:
            self.rm_wg.save_checkpoint(os.path.join(ckpt_dir, PRM_CHECKPOINT_DIR), self.global_steps, None)

    def load_worker_checkpoints(self, ckpt_dir: str) -> None:
        super().load_worker_checkpoints(ckpt_dir)
        if self.use_rm:
            self.rm_wg.load_checkpoint(os.path.join(ckpt_dir, PRM_CHECKPOINT_DIR))

    # ------------------------------------------------------------------------------------- stages
    def build_pipeline(self) -> Pipeline:
        """Core's pipeline with the implicit PRM as a stage of its own, right before the advantage."""
        pipeline = super().build_pipeline()
        if self.use_rm:
            pipeline.insert_before("adv", Stage("prm", self.stage_prm))
        return pipeline

    def stage_reward(self, batch: DataProto, metrics: dict) -> DataProto:
        """The rule reward only (the PRM scores later, on the filtered batch); ``acc`` = each answer's sum."""
        batch = self.rule_reward(batch, metrics)
        batch.batch["acc"] = outcome_labels(batch.batch["token_level_scores"])
        metrics["prime/all_acc/mean"] = float(batch.batch["acc"].mean())
        return batch

    def stage_filter(self, batch: DataProto, metrics: dict) -> DataProto:
        data = self.config.data
        result = accuracy_band_filter(
            batch.non_tensor_batch["uid"],
            batch.batch["acc"],
            keep_groups=int(data.train_batch_size),
            filter_accuracy=bool(data.filter_accuracy),
            lower=float(data.accuracy_lower_bound),
            upper=float(data.accuracy_upper_bound),
            response_lengths=batch.batch["response_mask"].sum(-1),
            filter_truncate=bool(data.filter_truncate),
            max_response_length=int(data.max_response_length),
        )
        metrics.update(result.metrics())
        return batch.select_idxs(torch.from_numpy(result.rows))

    def stage_prm(self, batch: DataProto, metrics: dict) -> DataProto:
        """Train and/or score with the implicit PRM; adds ``prm_log_ratio`` and the implicit rewards
        ``rm_scores`` (granularity, then ``prime_norm`` over the whole batch)."""
        rm = self.config.reward.reward_model
        mask = batch.batch["response_mask"]
        uids = batch.non_tensor_batch["uid"]
        acc = batch.batch["acc"]
        update = rm.model["update"]  # item access: DictConfig.update is a method
        out = None
        if update in ("before", "after"):
            out = self.rm_wg.update_rm(batch)
            metrics.update(reduce_metrics(out.meta_info.get("metrics", {})))
            metrics["reward_model/dpo_acc_before"] = compute_dpo_accuracy(
                out.batch["prm_log_ratio"], acc, mask, uids
            )
        if update in ("before", "none"):
            out = self.rm_wg.compute_rm_score(batch)
            metrics["reward_model/dpo_acc"] = compute_dpo_accuracy(
                out.batch["prm_log_ratio"], acc, mask, uids
            )
        q = batch.batch["prm_log_ratio"] = out.batch["prm_log_ratio"]
        scores = implicit_process_reward(q, mask, float(rm.model.beta_train), rm.prime_granularity)
        batch.batch["rm_scores"] = prime_norm(scores, mask, rm.prime_norm)
        metrics["reward_model/reward"] = float(batch.batch["rm_scores"].sum(-1).mean())
        metrics["reward_model/raw_reward"] = float(sequence_log_ratio(q, mask).mean())
        metrics["reward_model/abs_acc"] = compute_dpo_abs_accuracy(q, acc, mask)
        return batch

    def stage_adv(self, batch: DataProto, metrics: dict) -> DataProto:
        """PRIME's RLOO over the outcome and (after the ``prm`` stage) the process rewards."""
        algo = self.config.algorithm
        b = batch.batch
        b["token_level_rewards"] = b["token_level_scores"]  # the outcome reward, for core's metrics
        advantages, returns = compute_prime_rloo_advantage(
            response_mask=b["response_mask"],
            index=batch.non_tensor_batch["uid"],
            acc=b["acc"],
            rm_scores=b["rm_scores"] if self.use_rm else None,
            reward_gt_coef=float(algo.reward_gt_coef),
            reward_dpo_coef=float(algo.reward_dpo_coef),
        )
        b["advantages"], b["returns"] = advantages, returns
        return batch

    # ---------------------------------------------------------------------------------- validation
    def validate(self) -> dict[str, float]:
        metrics = super().validate()
        if self.use_rm and self.val_dataloader is not None:
            metrics.update(self.validate_prm())
        return metrics

    def validate_prm(self) -> dict[str, float]:
        """The PRM on held-out outcome labels: a second pass of core's validation rollouts (``val_kwargs``
        samples, labelled by the validation reward), scored by the PRM as it is now (never trained on them).

        ``val-prm/pair_acc``: pairs of one prompt's answers with different labels that the PRM orders right
        (upstream's ``dpo_acc``; 0.5 is chance; needs ``val_kwargs.n >= 2`` and sampling);
        ``val-prm/acc``: share of answers whose implicit outcome ``sum q`` has the label's sign (upstream's
        ``dpo_abs_acc``); ``val-prm/positive_rate``: share of right answers (``1 - positive_rate`` is the
        ``acc`` of a PRM that always says "wrong").
        """
        qs, labels, masks, uids = [], [], [], []
        for batch, reward_tensor, _ in self.validation_rollouts():
            qs.append(self.rm_wg.compute_rm_score(batch).batch["prm_log_ratio"])
            labels.append(outcome_labels(reward_tensor))
            masks.append(batch.batch["response_mask"])
            uids.append(batch.non_tensor_batch["uid"])
        width = max(q.shape[-1] for q in qs)
        q = torch.cat([torch.nn.functional.pad(x, (0, width - x.shape[-1])) for x in qs])
        mask = torch.cat([torch.nn.functional.pad(m, (0, width - m.shape[-1])) for m in masks])
        acc = torch.cat(labels)
        return {
            "val-prm/acc": compute_dpo_abs_accuracy(q, acc, mask),
            "val-prm/positive_rate": float((acc > 0.5).double().mean()),
            "val-prm/pair_acc": compute_dpo_accuracy(q, acc, mask, np.concatenate(uids)),
        }
