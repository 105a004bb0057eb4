"""The PPO critic over a data-parallel training engine built with ``model_type="value"``.

Sizes as for the actor: mini-batches of ``ppo_mini_batch_size_per_rank`` trajectories (the worker
derives ``critic.ppo_mini_batch_size * rollout_n // dp_size``), micro-batches of
``critic.ppo_micro_batch_size_per_gpu`` for updates and ``forward_micro_batch_size_per_gpu`` (or
meta_info ``micro_batch_size``) for :meth:`compute_values`; with ``use_dynamic_bsz`` token budgets
``ppo_max_token_len_per_gpu`` / ``forward_max_token_len_per_gpu`` instead.
"""

from __future__ import annotations

from typing import Any

import torch
from verl import DataProto
from verl.trainer.ppo.core_algos import GlobalBatchInfo, compute_value_loss
from verl.utils.micro_batching import rows_per_micro_batch
from verl.utils.torch_functional import masked_mean
from verl.workers.actor.dp_actor import (
    _response_mask,
    _sum_over_ranks,
    model_inputs,
    response_mask_of,
    restore_order,
    split_for_engine,
)
from verl.workers.engine.base import BaseEngine

_MODEL_INPUTS = ("input_ids", "attention_mask", "position_ids", "responses")


class DataParallelPPOCritic:
    """PPO critic. ``config`` is ``critic`` (read only)."""

    def __init__(self, config: Any, engine: BaseEngine, *, ppo_mini_batch_size_per_rank: int | None = None):
        if engine.model_type != "value":
            raise ValueError(f"the critic needs an engine built with model_type='value', got {engine.model_type!r}")
        self.config = config
        self.engine = engine
        self.ppo_mini_batch_size_per_rank = ppo_mini_batch_size_per_rank

    def compute_values(self, data: DataProto) -> torch.Tensor:
        """Values [N, R] of the state before each response token, zero outside ``response_mask``."""
        cfg = self.config
        micro = rows_per_micro_batch(
            data.batch["input_ids"].shape[-1],
            micro_batch_size=data.meta_info.get("micro_batch_size") or cfg.forward_micro_batch_size_per_gpu,
            use_dynamic_bsz=bool(cfg.use_dynamic_bsz), max_token_len=cfg.forward_max_token_len_per_gpu,
        )
        batch = model_inputs(data, _MODEL_INPUTS)
        micro_batches, order = split_for_engine(
            batch, self.engine, rows=int(micro), use_dynamic_bsz=bool(cfg.use_dynamic_bsz),
            max_token_len=cfg.forward_max_token_len_per_gpu,
        )
        values = restore_order(self.engine.infer(micro_batches)["values"], order)
        return values * response_mask_of(data).to(values.dtype)

    def _loss_fn(self, info: GlobalBatchInfo):
        cfg = self.config
        n_tokens = max(info.global_token_count, 1.0)

        def loss_fn(out: dict[str, torch.Tensor], mb) -> tuple[torch.Tensor, dict[str, Any]]:
            vpreds = out["values"]
            dev = vpreds.device
            mask = _response_mask(mb).to(dev)
            vf_loss, vf_clipfrac = compute_value_loss(
                vpreds=vpreds, returns=mb["returns"].to(dev), values=mb["values"].to(dev),
                response_mask=mask, cliprange_value=float(cfg.cliprange_value),
                loss_agg_mode=cfg.loss_agg_mode, global_batch_info=info,
            )
            share = float(mask.sum().item()) / n_tokens
            metrics = {
                "vf_loss": float(vf_loss.detach().item()),
                "vf_clipfrac": float(vf_clipfrac) * share,
                "vpred_mean": float(masked_mean(vpreds.detach(), mask).item()) * share,
            }
            return vf_loss, metrics

        return loss_fn

    def update_critic(self, data: DataProto) -> dict[str, Any]:
        """One training step of the value model (``ppo_epochs`` x mini-batches, then one LR step).
        Metrics: ``critic/vf_loss``, ``critic/vf_clipfrac``, ``critic/vpred_mean``, ``critic/grad_norm``,
        ``critic/lr``; whole-mini-batch values averaged over optimizer steps."""
        cfg = self.config
        mini = self.ppo_mini_batch_size_per_rank
        if mini is None or mini <= 0:
            raise ValueError(
                "DataParallelPPOCritic.update_critic needs ppo_mini_batch_size_per_rank "
                "(= critic.ppo_mini_batch_size * rollout_n // dp_size), given to the constructor"
            )
        # the last mini-batch may be shorter (upstream's data.split); every rank holds as many rows, so the
        # k-th mini-batches line up across ranks and their global token counts are all-reduced as usual
        keys = list(_MODEL_INPUTS) + ["values", "returns"]
        if "response_mask" in data.batch:
            keys.append("response_mask")
        missing = [k for k in keys if k not in data.batch]
        if missing:
            raise KeyError(f"update_critic needs batch keys {missing}; the batch has {sorted(data.batch.keys())}")
        data = model_inputs(data, keys)
        micro = rows_per_micro_batch(
            data.batch["input_ids"].shape[-1], micro_batch_size=cfg.ppo_micro_batch_size_per_gpu,
            use_dynamic_bsz=bool(cfg.use_dynamic_bsz), max_token_len=cfg.ppo_max_token_len_per_gpu,
        )
        lr = self.engine.get_lr()
        step_metrics = []
        for epoch in range(int(cfg.ppo_epochs)):
            if cfg.shuffle:
                g = torch.Generator().manual_seed(int(data.meta_info.get("global_steps", 0)) * 1000 + epoch)
                data = data.select_idxs(torch.randperm(len(data), generator=g))
            for mb in data.split(mini):
                info = GlobalBatchInfo.from_mask(response_mask_of(mb))
                if self.engine.dp_size > 1:
                    info = info.all_reduce(group=self.engine.dp_group)
                micro_batches, _ = split_for_engine(
                    mb, self.engine, rows=micro, use_dynamic_bsz=bool(cfg.use_dynamic_bsz),
                    max_token_len=cfg.ppo_max_token_len_per_gpu,
                )
                per_micro = self.engine.forward_backward(micro_batches, self._loss_fn(info))
                summed = _sum_over_ranks(per_micro, self.engine.dp_size, self.engine.dp_group)
                summed["grad_norm"] = self.engine.optimizer_step()
                step_metrics.append(summed)
        self.engine.lr_scheduler_step()
        result = {f"critic/{k}": sum(m[k] for m in step_metrics) / len(step_metrics) for k in step_metrics[0]}
        result["critic/lr"] = lr
        return result
