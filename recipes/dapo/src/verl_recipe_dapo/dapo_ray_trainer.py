"""``RayDAPOTrainer``: core's PPO loop with DAPO's dynamic sampling in the filter stage.

Of DAPO's four changes only dynamic sampling touches the loop; the other three are configuration of
what core and verl-rewards already offer (decoupled ``clip_ratio_low``/``clip_ratio_high``,
``loss_agg_mode=token-mean``, and the ``dapo`` reward manager's overlong buffer). So this class
overrides one stage, ``_stage_filter``: core's ``fit`` calls generate -> reward -> filter for each new
``data.gen_batch_size`` prompt batch and, while the filter returns None, fetches another batch without
advancing the step.
"""

from __future__ import annotations

from verl.protocol import DataProto
from verl.trainer.ppo.ray_trainer import RayPPOTrainer

from verl_recipe_dapo.dynamic_sampling import GroupAccumulator


class RayDAPOTrainer(RayPPOTrainer):
    """RayPPOTrainer + dynamic sampling (``algorithm.filter_groups.{enable,metric,max_num_gen_batches}``).

    Metrics per step: ``dapo/num_gen_batches`` (generation rounds this step took),
    ``dapo/kept_groups`` / ``dapo/dropped_groups`` (over those rounds), ``dapo/kept_group_ratio``, and
    ``dapo/all_<metric>/mean``, the filter metric averaged over every trajectory generated this step
    (before filtering: the policy's actual score, where ``critic/score/mean`` of the kept groups is not).
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        cfg = self.config
        fg = cfg.algorithm.filter_groups
        pad = self.tokenizer.pad_token_id if self.tokenizer is not None else None
        self.group_accumulator = GroupAccumulator(
            train_batch_size=int(cfg.data.train_batch_size),
            n=int(cfg.actor_rollout_ref.rollout.n),
            metric=str(fg.metric),
            max_num_gen_batches=int(fg.max_num_gen_batches),
            pad_token_id=int(pad) if pad is not None else 0,
        )

    def _stage_filter(self, batch: DataProto, metrics: dict) -> DataProto | None:
        if not self.config.algorithm.filter_groups.enable:
            return batch
        acc = self.group_accumulator
        acc.add(batch)  # raises DynamicSamplingError once max_num_gen_batches rounds fell short
        if not acc.ready:
            print(
                f"dynamic sampling: step {self.global_steps}: {acc.num_groups}/{acc.train_batch_size} groups "
                f"after {acc.num_gen_batches} generation batch(es); generating more",
                flush=True,
            )
            return None
        batch, dapo_metrics = acc.take()
        metrics.update(dapo_metrics)
        return batch
