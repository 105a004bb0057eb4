"""The implicit PRM inside one worker process: a trained causal LM and its frozen reference, on two engines.

No Ray here (the worker in ``prm_worker`` wraps it); tests drive it in-process over a one-rank gloo group.
Both models come from verl-workers' training-engine seam (``build_engine``: FSDP2 or FSDP, the same
engines as the actor); the reference is built without an optimizer, so it is frozen (``ref_type=freeze``).

- ``compute_rm_score``: eval-mode, no-grad forwards of both -> ``q = log pi_rm(y_t) - log pi_ref(y_t)`` [N, R]
  on the response tokens (0 elsewhere).
- ``update_rm``: the reference's log-probs first (no grad), then mini-batches of the PRM's own training
  forward with the CE loss on the outcome labels ``acc`` (`compute_ce_dpo_loss_rm`), one optimizer step
  per mini-batch and one LR-schedule step per call. Returns the ``q`` of those training forwards (each
  row scored by the PRM as it was when that row's mini-batch was trained: upstream's single-forward
  ``update=after``).

Sizes: micro-batches of ``micro_batch_size_per_gpu`` rows (or, with ``use_dynamic_bsz`` and a packing
engine, ``forward_max_token_len_per_gpu`` real tokens); mini-batches of ``mini_batch_size_per_rank`` rows
(the worker derives it from ``reward_model.mini_batch_size``). The loss of a micro-batch is its summed BCE
over the mini-batch's global row count, so one update is the same for any worker and micro-batch count.
"""

from __future__ import annotations

from typing import Any

import torch
from verl import DataProto
from verl.utils.micro_batching import rows_per_micro_batch
from verl.workers.actor.dp_actor import _sum_over_ranks, response_mask_of, restore_order, split_for_engine
from verl.workers.engine.base import BaseEngine

from verl_recipe_prime.prime_core_algos import compute_ce_dpo_loss_rm

_MODEL_INPUTS = ("input_ids", "attention_mask", "position_ids", "responses")


class DataParallelPRIMERewardModel:
    """The implicit PRM over a trained engine and a frozen reference engine.

    ``config`` is ``reward.reward_model`` (read only): ``micro_batch_size_per_gpu``, ``use_dynamic_bsz``,
    ``forward_max_token_len_per_gpu``, ``model.beta_train``, ``model.loss_type``.
    """

    def __init__(
        self, config: Any, rm_engine: BaseEngine, ref_engine: BaseEngine, *, mini_batch_size_per_rank: int
    ):
        for name, engine in (("PRM", rm_engine), ("reference", ref_engine)):
            if engine.model_type != "causal_lm":
                raise ValueError(
                    f"the implicit PRM's {name} must be a causal LM engine, got {engine.model_type!r}"
                )
        if ref_engine.optimizer is not None:
            raise ValueError(
                "the implicit PRM's reference is frozen (ref_type=freeze): build it without optim_config"
            )
        if config.model.loss_type != "ce":
            raise NotImplementedError(
                f"reward_model.model.loss_type={config.model.loss_type!r}: only ce is implemented"
            )
        self.config = config
        self.rm_engine = rm_engine
        self.ref_engine = ref_engine
        self.mini_batch_size_per_rank = int(mini_batch_size_per_rank)
        self.beta = float(config.model.beta_train)

    # ------------------------------------------------------------------ forwards
    def _micro_rows(self, data: DataProto) -> int:
        cfg = self.config
        return rows_per_micro_batch(
            data.batch["input_ids"].shape[-1],
            micro_batch_size=cfg.micro_batch_size_per_gpu,
            use_dynamic_bsz=bool(cfg.use_dynamic_bsz),
            max_token_len=cfg.forward_max_token_len_per_gpu,
        )

    def _split(self, data: DataProto, engine: BaseEngine) -> tuple[list[Any], torch.Tensor | None]:
        cfg = self.config
        return split_for_engine(
            data,
            engine,
            rows=self._micro_rows(data),
            use_dynamic_bsz=bool(cfg.use_dynamic_bsz),
            max_token_len=cfg.forward_max_token_len_per_gpu,
        )

    def _log_probs(self, data: DataProto, engine: BaseEngine) -> torch.Tensor:
        """Log-probs [N, R] of ``responses`` under ``engine`` (eval mode, no grad, temperature 1)."""
        micro_batches, order = self._split(data.select(batch_keys=list(_MODEL_INPUTS)), engine)
        return restore_order(engine.infer(micro_batches)["log_probs"], order)

    def compute_rm_score(self, data: DataProto) -> torch.Tensor:
        """``q`` [N, R]: the PRM's log-ratio to the reference on each response token, 0 elsewhere."""
        mask = response_mask_of(data).to(torch.float32)
        rm = self._log_probs(data, self.rm_engine)
        ref = self._log_probs(data, self.ref_engine)
        return (rm - ref) * mask

    # ------------------------------------------------------------------ training
    def _loss_fn(self, global_rows: int, collected: list[torch.Tensor]):
        beta = self.beta

        def loss_fn(out: dict[str, torch.Tensor], mb) -> tuple[torch.Tensor, dict[str, Any]]:
            lp = out["log_probs"]
            dev = lp.device
            mask = mb["response_mask"].to(dev)
            q = (lp - mb["ref_log_probs"].to(dev)) * mask.to(lp.dtype)
            collected.append(q.detach().cpu())
            loss = compute_ce_dpo_loss_rm(q, mb["acc"].to(dev), mask, beta, reduction="sum") / global_rows
            # per-row shares of the mini-batch mean: summed over micro-batches and ranks they are the mean
            return loss, {"dpo_loss": float(loss.detach().item())}

        return loss_fn

    def update_rm(self, data: DataProto) -> tuple[torch.Tensor, dict[str, float]]:
        """Train on this rank's rows (``acc`` [N] outcome labels in [0, 1]); returns ``q`` [N, R] from the
        training forwards and the metrics ``reward_model/dpo_loss``, ``reward_model/grad_norm``, ``rm/lr``
        (averaged over this call's optimizer steps; identical on every rank)."""
        mini = self.mini_batch_size_per_rank
        if len(data) % mini:
            raise ValueError(
                f"this PRM rank has {len(data)} rows, not a multiple of its mini-batch of {mini} rows "
                f"(reward_model.mini_batch_size / PRM workers)"
            )
        acc = data.batch["acc"].float()
        if bool(((acc < 0) | (acc > 1)).any()):
            bad = sorted({round(float(a), 4) for a in acc[(acc < 0) | (acc > 1)].tolist()})[:5]
            raise ValueError(
                f"the PRM's CE loss needs outcome labels in [0, 1]; got {bad}: the reward function must score "
                f"each answer 0..1 (e.g. 1 right, 0 wrong)"
            )
        ref = self._log_probs(data, self.ref_engine)
        batch = data.select(batch_keys=list(_MODEL_INPUTS))
        batch.batch["ref_log_probs"] = ref
        batch.batch["acc"] = acc
        batch.batch["response_mask"] = response_mask_of(data)
        global_rows = mini * self.rm_engine.dp_size
        lr = self.rm_engine.get_lr()
        qs: list[torch.Tensor] = []
        step_metrics = []
        for mb in batch.split(mini):
            collected: list[torch.Tensor] = []
            micro_batches, order = self._split(mb, self.rm_engine)
            per_micro = self.rm_engine.forward_backward(micro_batches, self._loss_fn(global_rows, collected))
            qs.append(restore_order(torch.cat(collected, dim=0), order))
            summed = _sum_over_ranks(per_micro, self.rm_engine.dp_size)
            summed["grad_norm"] = self.rm_engine.optimizer_step()
            step_metrics.append(summed)
        self.rm_engine.lr_scheduler_step()
        metrics = {
            f"reward_model/{k}": sum(m[k] for m in step_metrics) / len(step_metrics) for k in step_metrics[0]
        }
        metrics["rm/lr"] = lr
        return torch.cat(qs, dim=0), metrics
