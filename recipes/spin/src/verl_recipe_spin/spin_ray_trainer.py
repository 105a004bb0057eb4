"""``RaySPINTrainer``: core's pipeline as iterative online DPO, through three stage overrides.

    gen       - every ``trainer.ref_update_freq`` steps first give the reference the actor's weights
                (upstream's schedule: at the start of steps freq, 2 freq, ...); spin_mode=sft then puts
                each prompt's target answer next to the model's own answer
    filter    - spin_mode=reward keeps the best and the worst scored answer of each prompt
    (balance, old_log_prob, ref, adv: core's stages; the ``spin`` estimator labels the pairs)
    update_actor - the actor's DPO step: the reference log-probs go in the loss's ``old_log_prob`` slot and
                ``rows_per_prompt=2`` keeps every pair in one micro-batch

The reference always exists (it is DPO's anchor) and lives in the actor's process, where the refresh
copies the weights (``ActorRolloutRefWorker.refresh_ref_from_actor``).
"""

from __future__ import annotations

from typing import Any

import torch
from verl.protocol import DataProto
from verl.trainer.ppo.ray_trainer import RayPPOTrainer

from verl_recipe_spin.pairs import field_value, reward_pairs, sft_pairs, stop_token_ids, target_token_ids


class RaySPINTrainer(RayPPOTrainer):
    """RayPPOTrainer + SPIN's pairs, reference refresh and DPO update (see the module doc).

    Metrics per step: ``spin/gen_score/mean`` (rule score of the model's own answers: its training
    accuracy), ``spin/preference_pairs`` (reward mode: share of prompts whose answers disagree),
    ``spin/contested_pairs`` (share of pairs with a preference and two different answers),
    ``spin/logp_margin`` (mean ``log pi(y_w) - log pi(y_l)`` of the contested pairs under the policy
    before the update: it grows as the policy separates them), ``spin/reward_margin`` (``beta`` times
    the DPO logit before the update: how far the policy already moved from the reference on these pairs;
    0 right after a refresh), ``spin/ref_refreshed``; from the actor ``actor/dpo_margin``,
    ``actor/dpo_accuracy``, ``actor/pg_loss``.
    ``critic/score/mean`` is over the trained rows (chosen and rejected), not over every answer.
    """

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        if not self.ref_in_actor:
            raise ValueError(
                "SPIN refreshes the reference from the actor inside one worker: the role mapping needs "
                "Role.ActorRolloutRef (verl_recipe_spin.main_spin.role_worker_mapping)"
            )
        self.use_reference_policy = True  # DPO's anchor, whatever core's KL settings say
        self._stop_ids: set[int] | None = None  # the rollout's stop tokens, read once (spin_mode=sft)

    # ---------------------------------------------------------------------------------------- stages
    def stage_gen(self, batch: DataProto, metrics: dict) -> DataProto:
        freq = int(self.config.trainer.ref_update_freq)
        refresh = freq > 0 and self.global_steps % freq == 0
        if refresh:
            self.actor_rollout_wg.refresh_ref_from_actor()
        metrics["spin/ref_refreshed"] = float(refresh)
        batch = super().stage_gen(batch, metrics)
        if self.config.algorithm.spin_mode == "sft":
            batch = sft_pairs(
                batch,
                self._targets(batch),
                self._pad_token_id(),
                int(self.config.actor_rollout_ref.rollout.response_length),
            )
        return batch

    def stage_filter(self, batch: DataProto, metrics: dict) -> DataProto:
        if self.config.algorithm.spin_mode == "reward":
            batch, pair_metrics = reward_pairs(batch)
            metrics.update(pair_metrics)
            return batch
        scores = (batch.batch["token_level_scores"] * batch.batch["response_mask"]).sum(dim=-1).view(-1, 2)
        metrics["spin/gen_score/mean"] = float(scores[:, 1].mean().item())  # odd rows: the model's answers
        metrics["spin/target_score/mean"] = float(scores[:, 0].mean().item())
        return batch

    def stage_update_actor(self, batch: DataProto, metrics: dict) -> DataProto:
        metrics.update(self._pair_metrics(batch))
        tensors = {key: batch.batch[key] for key in batch.batch.keys()}
        tensors["old_log_probs"] = batch.batch["ref_log_prob"]  # the DPO loss compares with the reference
        update = DataProto.from_dict(
            tensors=tensors,
            non_tensors=dict(batch.non_tensor_batch),
            meta_info={**batch.meta_info, "rows_per_prompt": 2},
        )
        super().stage_update_actor(update, metrics)
        return batch

    def load_checkpoint(self) -> int:
        """Core's resume; then the reference restarts from the resumed actor (the reference is not
        checkpointed: exact for ref_update_freq=1, a restart of the interval otherwise)."""
        step = super().load_checkpoint()
        if step > 0 and int(self.config.trainer.ref_update_freq) > 0:
            self.actor_rollout_wg.refresh_ref_from_actor()
        return step

    # --------------------------------------------------------------------------------------- helpers
    def _pad_token_id(self) -> int:
        pad = self.tokenizer.pad_token_id
        return int(pad if pad is not None else self.tokenizer.eos_token_id)

    def _targets(self, batch: DataProto) -> list[list[int]]:
        if self._stop_ids is None:
            model = self.config.actor_rollout_ref.model
            self._stop_ids = stop_token_ids(model.path, self.tokenizer, bool(model.trust_remote_code))
        key = str(self.config.algorithm.spin_target_key)
        chat_kwargs = dict(self.config.data.apply_chat_template_kwargs)
        prompts = batch.non_tensor_batch["raw_prompt"]
        return [
            target_token_ids(
                self.tokenizer, list(prompts[i]), field_value(batch, key, i), self._stop_ids, chat_kwargs
            )
            for i in range(len(batch))
        ]

    def _pair_metrics(self, batch: DataProto) -> dict[str, float]:
        """Margins before the update over the contested pairs: a preference and two different answers (a
        pair whose two answers are the same tokens has margin 0 whatever the policy; counting those would
        make the margin fall as the model gets more answers right). See the class doc."""
        mask = batch.batch["response_mask"].to(torch.float32)
        labels = torch.sign((batch.batch["advantages"] * mask).sum(-1)).view(-1, 2)[:, 0]
        tokens = (batch.batch["responses"] * batch.batch["response_mask"]).view(-1, 2, mask.shape[-1])
        lengths = batch.batch["response_mask"].sum(-1).view(-1, 2)
        same = (lengths[:, 0] == lengths[:, 1]) & (tokens[:, 0] == tokens[:, 1]).all(-1)
        contested = (labels != 0) & ~same
        out = {"spin/contested_pairs": float(contested.float().mean().item())}
        if not contested.any():
            return {**out, "spin/logp_margin": 0.0, "spin/reward_margin": 0.0}

        def margin(log_probs: torch.Tensor) -> torch.Tensor:
            seq = (log_probs * mask).sum(-1).view(-1, 2)
            return (labels * (seq[:, 0] - seq[:, 1]))[contested]

        old, ref = batch.batch["old_log_probs"], batch.batch["ref_log_prob"]
        beta = float(self.config.algorithm.dpo_beta)
        return {
            **out,
            "spin/logp_margin": float(margin(old).mean().item()),
            "spin/reward_margin": float((beta * margin(old - ref)).mean().item()),
        }
