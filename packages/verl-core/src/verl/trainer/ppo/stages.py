"""The stages of one PPO-family step, as public methods of the trainer.

Stage ``X`` is the method ``stage_X(batch, metrics) -> batch | None``, run by the pipeline
(``verl.trainer.ppo.pipeline``) and timed as ``timing_s/X``; ``RayPPOTrainer.build_pipeline`` puts them
in order for the config::

    gen -> [gkd_mix] -> [greedy_baseline] -> reward -> filter -> balance -> old_log_prob -> ref -> [teacher]
        -> values -> adv -> update_critic -> update_actor -> [dump_rollout] -> [testing] -> [save_checkpoint]

(``gkd_mix`` and ``teacher`` only with ``distillation.enabled``: on-policy distillation.)

A subclass overrides ``stage_X`` to give a stage another body, or edits the pipeline in its
``build_pipeline`` to insert, replace or wrap stages by name. The names are upstream's timing keys.
With ``reward.use_reward_loop``, ``gen`` generates in chunks that the reward loop scores while the next
chunk generates (``ppo.reward_loop``), and ``reward`` collects the scores.
"""

from __future__ import annotations

import uuid
from collections import defaultdict

import numpy as np

from verl.protocol import DataProto
from verl.trainer.distillation import gkd, teacher_step
from verl.trainer.ppo import core_algos
from verl.trainer.ppo.balance import balance_batch
from verl.trainer.ppo.dumps import REWARD_EXTRA_KEYS
from verl.trainer.ppo.dynamic_sampling import concat_rounds
from verl.trainer.ppo.metric_utils import reduce_metrics
from verl.trainer.ppo.reward import check_reward_result, compute_reward
from verl.trainer.ppo.reward_loop import RewardLoop, chunk_bounds
from verl.trainer.ppo.roles import merge_outputs
from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_and_add_to_batch

__all__ = ["PROMPT_TENSOR_KEYS", "StagesMixin"]

#: Prompt tensors the rollout replaces with prompt+response tensors of the same names.
PROMPT_TENSOR_KEYS = ("input_ids", "attention_mask", "position_ids")


class StagesMixin:
    """The stage bodies of ``RayPPOTrainer`` (expects its attributes: config, worker groups, reward_fn)."""

    #: the reward loop (``reward.use_reward_loop``), else None: the reward stage scores in one pass
    reward_loop: RewardLoop | None = None

    # --------------------------------------------------------------------------------- generation
    def rollout_input(self, batch: DataProto, do_sample: bool, validate: bool) -> DataProto:
        """What the rollout sees: the prompt tensors, every non-tensor (raw prompts, tools...), flags."""
        tensors = batch.batch.select(*PROMPT_TENSOR_KEYS)
        meta = dict(batch.meta_info, do_sample=do_sample, validate=validate, global_steps=self.global_steps)
        return DataProto(batch=tensors, non_tensor_batch=dict(batch.non_tensor_batch), meta_info=meta)

    def stage_gen(self, batch: DataProto, metrics: dict) -> DataProto:
        """Give each prompt a ``uid``, repeat it ``rollout.n`` times (group rows adjacent), generate."""
        rollout = self.config.actor_rollout_ref.rollout
        batch.non_tensor_batch["uid"] = np.array([str(uuid.uuid4()) for _ in range(len(batch))], dtype=object)
        batch = batch.repeat(repeat_times=rollout.n, interleave=True)
        if self.reward_loop is not None:
            return self.generate_scored(batch, metrics)
        output = self.actor_rollout_wg.generate_sequences(self.rollout_input(batch, rollout.do_sample, False))
        batch.pop(batch_keys=list(PROMPT_TENSOR_KEYS))
        batch, gen_metrics = merge_outputs(batch, output)
        metrics.update(reduce_metrics(gen_metrics))
        return batch

    def generate_scored(self, batch: DataProto, metrics: dict) -> DataProto:
        """With ``reward.use_reward_loop``: generate ``batch`` (prompt rows, groups adjacent) in
        ``reward.reward_loop_chunks`` chunks of whole groups, handing each chunk to the reward loop as soon
        as it is generated, so its samples are scored while the next chunk generates (``ppo.reward_loop``);
        the reward stage collects the scores. Returns the chunks' rows as one batch, in order."""
        rollout = self.config.actor_rollout_ref.rollout
        loop = self.reward_loop
        loop.start()
        chunks, gen_metrics = [], defaultdict(list)
        bounds = chunk_bounds(len(batch) // rollout.n, rollout.n, self.config.reward.reward_loop_chunks)
        for k, (start, end) in enumerate(bounds):
            chunk = batch.slice(start, end)
            gen_input = self.rollout_input(chunk, rollout.do_sample, False)
            gen_input.meta_info["more_chunks"] = k + 1 < len(bounds)  # the engine stays awake until the last
            loop.record("gen_start", k)
            output = self.actor_rollout_wg.generate_sequences(gen_input)
            loop.record("gen_end", k)
            chunk.pop(batch_keys=list(PROMPT_TENSOR_KEYS))
            chunk, chunk_metrics = merge_outputs(chunk, output)
            loop.submit(chunk, k)
            chunks.append(chunk)
            for key, value in chunk_metrics.items():
                gen_metrics[key].extend(value if isinstance(value, list) else [value])
        metrics.update(reduce_metrics(dict(gen_metrics)))
        metrics["reward_loop/chunks"] = len(chunks)
        pad = self.tokenizer.pad_token_id if self.tokenizer is not None else 0
        return concat_rounds(chunks, pad) if len(chunks) > 1 else chunks[0]

    def stage_gkd_mix(self, batch: DataProto, metrics: dict) -> DataProto:
        """GKD's on-policy fraction (``distillation.distillation_loss.lmbda`` < 1): some rows' responses
        become their dataset targets (``verl.trainer.distillation.gkd``)."""
        return gkd.mix_in_targets(batch, self.tokenizer, self.config, metrics)

    def stage_greedy_baseline(self, batch: DataProto, metrics: dict) -> DataProto:
        """ReMax (``adv_estimator=remax``): the reward of a greedy rollout of each row's prompt, one number
        per row, as ``reward_baselines``."""
        prompt_len = batch.batch["prompts"].shape[-1]
        prompts = DataProto.from_dict(
            tensors={k: batch.batch[k][..., :prompt_len] for k in PROMPT_TENSOR_KEYS},
            non_tensors=dict(batch.non_tensor_batch),
            meta_info=dict(batch.meta_info),
        )
        out = self.actor_rollout_wg.generate_sequences(self.rollout_input(prompts, do_sample=False, validate=False))
        scored = DataProto(batch=out.batch, non_tensor_batch=dict(batch.non_tensor_batch), meta_info={})
        reward_tensor, _ = compute_reward(scored, self.reward_fn)
        batch.batch["reward_baselines"] = reward_tensor.sum(-1)
        return batch

    # -------------------------------------------------------------------------------------- reward
    def stage_reward(self, batch: DataProto, metrics: dict) -> DataProto:
        """Model reward (``rm_scores``) when enabled, then the rule reward -> ``token_level_scores``."""
        if self.use_rm:
            batch, rm_metrics = merge_outputs(batch, self.rm_wg.compute_rm_score(batch))
            metrics.update(reduce_metrics(rm_metrics))
        if self.reward_fn is None:
            if not self.use_rm:
                raise ValueError("no reward: pass reward_fn to RayPPOTrainer or enable reward.reward_model")
            batch.batch["token_level_scores"] = batch.batch["rm_scores"]
            return batch
        return self.rule_reward(batch, metrics)

    def rule_reward(self, batch: DataProto, metrics: dict) -> DataProto:
        """``reward_fn``'s scores -> ``token_level_scores``, its extra columns -> ``non_tensor_batch`` (and the
        means of the numeric ones -> ``reward_extra/<key>/mean``). The rule part of the reward stage, on its
        own for a recipe whose reward model runs in another stage."""
        if self.reward_loop is not None and self.reward_loop.active:  # scored while generating
            result = self.reward_loop.result(batch)
            reward_tensor, extra = check_reward_result(batch, result, self.reward_fn, metrics=metrics)
            metrics["reward_loop/overlapped_chunks"] = self.reward_loop.overlapped_chunks()
        else:
            reward_tensor, extra = compute_reward(batch, self.reward_fn, metrics=metrics)
        batch.batch["token_level_scores"] = reward_tensor
        batch.meta_info[REWARD_EXTRA_KEYS] = sorted(extra)  # for the rollout dump (trainer.rollout_data_dir)
        for key, values in extra.items():
            batch.non_tensor_batch[key] = np.array(values, dtype=object)
            numeric = [float(v) for v in values if isinstance(v, bool | int | float | np.number)]
            if len(numeric) == len(values) and numeric:
                metrics[f"reward_extra/{key}/mean"] = float(np.mean(numeric))
        return batch

    # ---------------------------------------------------------------------------------- selection
    def stage_filter(self, batch: DataProto, metrics: dict) -> DataProto | None:
        """Dynamic sampling (``algorithm.filter_groups.enable``; ``ppo.dynamic_sampling``): keep the groups
        whose ``filter_groups.metric`` varies, and return None (generate another ``data.gen_batch_size``
        prompts, same step) until ``data.train_batch_size`` groups are collected; then the batch, trimmed
        to exactly that many. Raises ``DynamicSamplingError`` after ``max_num_gen_batches`` short rounds.
        Disabled: the batch as it is."""
        acc = self.group_accumulator
        if acc is None:
            return batch
        acc.add(batch)
        if not acc.ready:
            print(
                f"dynamic sampling: step {self.global_steps}: {acc.num_groups}/{acc.train_batch_size} groups "
                f"after {acc.num_gen_batches} generation batch(es); generating more",
                flush=True,
            )
            return None
        batch, ds_metrics = acc.take()
        metrics.update(ds_metrics)
        return batch

    def stage_balance(self, batch: DataProto, metrics: dict) -> DataProto:
        """With ``trainer.balance_batch``, reorder rows so each data-parallel rank gets a similar token count
        (``ppo.balance``); then record every row's token count (``global_token_num``, for throughput)."""
        if self.config.trainer.balance_batch:
            batch = balance_batch(batch, self.actor_rollout_wg.world_size, metrics)
        batch.meta_info["global_token_num"] = batch.batch["attention_mask"].sum(-1).tolist()
        return batch

    # ----------------------------------------------------------------------------- forward passes
    def stage_old_log_prob(self, batch: DataProto, metrics: dict) -> DataProto:
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

    def stage_ref(self, batch: DataProto, metrics: dict) -> DataProto:
        """The reference policy's log-probs (``ref_log_prob``) when a KL term needs them."""
        if not self.use_reference_policy:
            return batch
        batch, ref_metrics = merge_outputs(batch, self.ref_policy_wg.compute_ref_log_prob(batch))
        metrics.update(reduce_metrics(ref_metrics))
        return batch

    def stage_teacher(self, batch: DataProto, metrics: dict) -> DataProto:
        """On-policy distillation: each row's teacher log-probs (``teacher_logprobs``, ``teacher_ids``), from
        the teacher its ``distillation.teacher_key`` picks (``verl.trainer.distillation.teacher_step``)."""
        if not getattr(self, "teacher_wgs", None):
            raise RuntimeError(
                f"distillation.enabled=true but {type(self).__name__} started no teacher worker group: its "
                "init_workers must start them as RayPPOTrainer.init_workers does (teacher_pool.start_teachers)"
            )
        return teacher_step.compute_teacher_log_probs(batch, self.teacher_wgs, self.config.distillation, metrics)

    def stage_values(self, batch: DataProto, metrics: dict) -> DataProto:
        """The critic's ``values`` when the estimator needs a critic."""
        if not self.use_critic:
            return batch
        batch, v_metrics = merge_outputs(batch, self.critic_wg.compute_values(batch))
        metrics.update(reduce_metrics(v_metrics))
        return batch

    # ---------------------------------------------------------------------------------- advantage
    def stage_adv(self, batch: DataProto, metrics: dict) -> DataProto:
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

    # ------------------------------------------------------------------------------------ updates
    def stage_update_critic(self, batch: DataProto, metrics: dict) -> DataProto:
        """One critic update on the batch (when there is a critic)."""
        if self.use_critic:
            output = self.critic_wg.update_critic(batch)
            metrics.update(reduce_metrics(output.meta_info.get("metrics", {})))
        return batch

    def stage_update_actor(self, batch: DataProto, metrics: dict) -> DataProto:
        """One actor update on the batch, once ``trainer.critic_warmup`` steps have passed (with a critic: the
        warm-up trains it alone; without one the key is accepted only where the config turns the critic off
        itself, and nothing is warmed up, so the actor trains from the first step)."""
        if not self.use_critic or self.global_steps > self.config.trainer.critic_warmup:
            output = self.actor_rollout_wg.update_actor(batch)
            metrics.update(reduce_metrics(output.meta_info.get("metrics", {})))
        return batch

    # --------------------------------------------------------------------------------- after the update
    def stage_dump_rollout(self, batch: DataProto, metrics: dict) -> DataProto:
        """``trainer.rollout_data_dir/{step}.jsonl``: every trained trajectory (``ppo.dumps``)."""
        self.dump_rollout_data(batch)
        return batch

    def stage_testing(self, batch: DataProto, metrics: dict) -> DataProto:
        """Validation (``validate``) on the steps ``is_test_step`` names; its metrics join the step's."""
        metrics.update(self.validate())
        return batch

    def stage_save_checkpoint(self, batch: DataProto, metrics: dict) -> DataProto:
        """A ``global_step_N`` checkpoint (``save_checkpoint``) on the steps ``is_save_step`` names."""
        self.save_checkpoint()
        return batch
