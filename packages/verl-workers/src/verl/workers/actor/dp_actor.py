"""The PPO actor over a data-parallel training engine (upstream: ``DataParallelPPOActor``).

The actor holds the algorithm (policy loss, entropy bonus, KL loss, mini-batch/epoch loop); the engine
(``verl.workers.engine``) holds the model, its sharding and its optimizer.

Sizes: ``update_policy`` splits this rank's rows into mini-batches of ``ppo_mini_batch_size_per_rank``
trajectories (the worker derives it: ``actor.ppo_mini_batch_size * rollout.n // dp_size``) and each
mini-batch into micro-batches of ``actor.ppo_micro_batch_size_per_gpu`` rows (or, with
``use_dynamic_bsz``, as many rows as fit ``ppo_max_token_len_per_gpu`` padded tokens, or real tokens
when the engine packs sequences, ``model.use_remove_padding``). Losses use the mini-batch's
global token/sequence counts (summed over ranks), so the update is the same for any number of workers
and micro-batches.

Grouped layouts: a batch whose rows come in units that a loss reads together (DPO's chosen/rejected
pair) says so with ``meta_info["rows_per_prompt"] = k``: each prompt owns k adjacent rows (instead of
``rollout.n``). The update then sizes mini-batches as ``actor.ppo_mini_batch_size`` prompts x k rows
and never splits a prompt's rows: shuffling permutes whole units, fixed micro-batches must hold whole
units, token-budget micro-batches round down to whole units (packed budgets are refused).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from verl import DataProto
from verl.trainer.ppo.core_algos import GlobalBatchInfo, agg_loss, get_policy_loss_fn, kl_penalty
from verl.utils.micro_batching import rows_per_micro_batch, token_budget_groups
from verl.workers.engine.base import BaseEngine

_MODEL_INPUTS = ("input_ids", "attention_mask", "position_ids", "responses")


def micro_batch_size_for_inference(config: Any, data: DataProto) -> int:
    """Rows per forward micro-batch. A token budget when ``meta_info["use_dynamic_bsz"]`` (default: the
    config's ``log_prob_use_dynamic_bsz``, ref configs have it) of ``meta_info["max_token_len"]``
    (default ``log_prob_max_token_len_per_gpu``); else ``meta_info["micro_batch_size"]`` if set, else the
    config's ``log_prob_micro_batch_size_per_gpu``, else ``ppo_micro_batch_size_per_gpu``."""
    seq_len = data.batch["input_ids"].shape[-1]
    if data.meta_info.get("use_dynamic_bsz", config.get("log_prob_use_dynamic_bsz", False)):
        max_len = data.meta_info.get("max_token_len", config.get("log_prob_max_token_len_per_gpu"))
        return rows_per_micro_batch(seq_len, micro_batch_size=None, use_dynamic_bsz=True, max_token_len=max_len)
    size = data.meta_info.get("micro_batch_size")
    if size is None:
        for key in ("log_prob_micro_batch_size_per_gpu", "ppo_micro_batch_size_per_gpu",
                    "forward_micro_batch_size_per_gpu"):
            if key in config and config[key] is not None:
                size = config[key]
                break
    if size is None or int(size) <= 0:
        raise ValueError(
            f"no positive micro-batch size for a forward pass: meta_info['micro_batch_size']="
            f"{data.meta_info.get('micro_batch_size')!r} and the config sets none"
        )
    return int(size)


def split_for_engine(
    data: DataProto, engine: BaseEngine, *, rows: int, use_dynamic_bsz: bool, max_token_len: int | None
) -> tuple[list[Any], torch.Tensor | None]:
    """Micro-batches for ``engine``: ``rows`` rows each, or, when the engine packs sequences and
    ``use_dynamic_bsz``, groups of about ``max_token_len`` real tokens (same count on every rank).

    Returns the micro-batches and, for token groups, the row order they hold (``None``: in order);
    ``restore_order`` puts concatenated outputs back into the batch's row order.
    """
    if use_dynamic_bsz and engine.remove_padding:
        lengths = data.batch["attention_mask"].sum(-1).tolist()
        groups = token_budget_groups(lengths, int(max_token_len))
        order = torch.tensor([i for g in groups for i in g], dtype=torch.long)
        return [_engine_batch(data.select_idxs(torch.tensor(g, dtype=torch.long))) for g in groups], order
    return [_engine_batch(mb) for mb in data.split(rows)], None


#: the per-row vision inputs of vision-language models (a dict of pixel_values / image_grid_thw per row)
MM_KEY = "multi_modal_inputs"


def _engine_batch(data: DataProto):
    """The engine's micro-batch: the tensors, plus the rows' ``multi_modal_inputs`` when present
    (a plain dict then, since a TensorDict holds tensors only)."""
    if MM_KEY not in data.non_tensor_batch:
        return data.batch
    return {**dict(data.batch.items()), MM_KEY: data.non_tensor_batch[MM_KEY]}


def model_inputs(data: DataProto, keys) -> DataProto:
    """``data`` reduced to the batch ``keys`` and, for vision-language rows, ``multi_modal_inputs``."""
    return data.select(batch_keys=list(keys), non_tensor_batch_keys=[MM_KEY])


def restore_order(values: torch.Tensor, order: torch.Tensor | None) -> torch.Tensor:
    """Undo the row permutation of :func:`split_for_engine` on outputs concatenated along rows."""
    if order is None:
        return values
    inverse = torch.empty_like(order)
    inverse[order] = torch.arange(len(order))
    return values[inverse]


def response_mask_of(data: DataProto) -> torch.Tensor:
    """``response_mask`` if the batch has it, else the last R columns of ``attention_mask``."""
    if "response_mask" in data.batch:
        return data.batch["response_mask"]
    n_resp = data.batch["responses"].shape[-1]
    return data.batch["attention_mask"][:, -n_resp:]


class DataParallelPPOActor:
    """PPO actor (also the reference policy, which only calls :meth:`compute_log_prob`).

    ``config`` is ``actor_rollout_ref.actor`` (or ``.ref`` for the reference), read only.
    ``ppo_mini_batch_size_per_rank`` is needed by :meth:`update_policy` only.
    """

    def __init__(self, config: Any, engine: BaseEngine, *, ppo_mini_batch_size_per_rank: int | None = None,
                 distillation_loss: Any = None):
        self.config = config
        self.engine = engine
        self.ppo_mini_batch_size_per_rank = ppo_mini_batch_size_per_rank
        # ``distillation.distillation_loss`` when on-policy distillation is on (``verl.trainer.distillation``)
        self.distillation_loss = distillation_loss
        # The update needs token entropies for the loss (entropy_coeff != 0), or for the entropy metric
        # when no old-log-prob pass reported it (use_rollout_log_probs); otherwise a softmax pass saved.
        self._update_entropy = config.get("entropy_coeff", 0) != 0 or bool(config.get("use_rollout_log_probs", False))

    def compute_log_prob(
        self, data: DataProto, calculate_entropy: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Log-probs [N, R] of ``responses`` under ``logits / meta_info['temperature']`` (and the token
        entropies [N, R] when ``calculate_entropy``, else None). Every rank must call it with the same
        number of micro-batches (equal row counts)."""
        micro = micro_batch_size_for_inference(self.config, data)
        temperature = float(data.meta_info.get("temperature", 1.0))
        batch = model_inputs(data, _MODEL_INPUTS)
        micro_batches, order = split_for_engine(
            batch, self.engine, rows=micro,
            use_dynamic_bsz=bool(data.meta_info.get("use_dynamic_bsz", self.config.get("log_prob_use_dynamic_bsz", False))),
            max_token_len=data.meta_info.get("max_token_len", self.config.get("log_prob_max_token_len_per_gpu")),
        )
        out = self.engine.infer(micro_batches, temperature=temperature, calculate_entropy=calculate_entropy)
        entropys = restore_order(out["entropys"], order) if calculate_entropy else None
        return restore_order(out["log_probs"], order), entropys

    # ------------------------------------------------------------------ update
    def _select_for_update(self, data: DataProto) -> DataProto:
        keys = list(_MODEL_INPUTS) + ["old_log_probs", "advantages"]
        if "response_mask" in data.batch:
            keys.append("response_mask")
        if self.config.use_kl_loss:
            if "ref_log_prob" not in data.batch:
                raise KeyError(
                    "actor.use_kl_loss=True needs batch key 'ref_log_prob' (from the reference policy); "
                    f"the batch has {sorted(data.batch.keys())}"
                )
            keys.append("ref_log_prob")
        if "rollout_is_weights" in data.batch:
            keys.append("rollout_is_weights")
        if self.distillation_loss is not None:
            keys += _teacher_keys(self.distillation_loss)
        missing = [k for k in keys if k not in data.batch]
        if missing:
            raise KeyError(f"update_policy needs batch keys {missing}; the batch has {sorted(data.batch.keys())}")
        return model_inputs(data, keys)

    def _loss_fn(self, info: GlobalBatchInfo):
        cfg = self.config
        mode = cfg.loss_agg_mode
        policy_loss_fn = get_policy_loss_fn(cfg.policy_loss.loss_mode)
        n_tokens = max(info.global_token_count, 1.0)

        def loss_fn(out: dict[str, torch.Tensor], mb) -> tuple[torch.Tensor, dict[str, Any]]:
            dev = out["log_probs"].device
            mask = _response_mask(mb).to(dev)
            log_prob = out["log_probs"]
            weights = mb["rollout_is_weights"].to(dev) if "rollout_is_weights" in mb else None
            distill = self.distillation_loss
            # token share of this micro-batch: per-token-mean metrics are weighted by it and summed
            share = float(mask.sum().item()) / n_tokens
            metrics: dict[str, Any] = {}
            pg_loss = None
            if distill is None or distill.use_task_rewards:
                pg_loss, pg_metrics = policy_loss_fn(
                    old_log_prob=mb["old_log_probs"].to(dev), log_prob=log_prob,
                    advantages=mb["advantages"].to(dev), response_mask=mask, loss_agg_mode=mode,
                    config=cfg, rollout_is_weights=weights, global_batch_info=info,
                )
                metrics["pg_loss"] = float(pg_loss.detach().item())
                # the losses name their metrics 'actor/...' (upstream); update_policy adds the prefix itself
                metrics.update({k.removeprefix("actor/"): float(v) * share for k, v in pg_metrics.items()})
            loss = pg_loss
            if distill is not None:
                loss = _distillation_term(out, mb, mask, pg_loss, distill, mode, weights, info, share, metrics)
            if "entropys" in out:
                entropy = agg_loss(out["entropys"], mask, "token-mean", global_batch_info=info)
                metrics["entropy"] = float(entropy.detach().item())
            if cfg.entropy_coeff != 0:
                loss = loss - cfg.entropy_coeff * agg_loss(out["entropys"], mask, mode, global_batch_info=info)
            if cfg.use_kl_loss:
                kld = kl_penalty(log_prob, mb["ref_log_prob"].to(dev), cfg.kl_loss_type)
                kl_loss = agg_loss(kld, mask, mode, global_batch_info=info)
                loss = loss + cfg.kl_loss_coef * kl_loss
                metrics["kl_loss"] = float(kl_loss.detach().item())
            return loss, metrics

        return loss_fn

    def update_policy(self, data: DataProto) -> dict[str, Any]:
        """One training step: ``ppo_epochs`` passes over this rank's rows in mini-batches, one optimizer
        step per mini-batch, then one LR-scheduler step. Returns metrics averaged over the optimizer
        steps (``actor/pg_loss`` etc. are whole-mini-batch values, the same for any worker count);
        ``actor/lr`` is the rate the steps used."""
        cfg = self.config
        unit = int(data.meta_info.get("rows_per_prompt", 1))
        mini = self._mini_batch_rows(unit)
        # the last mini-batch may be shorter (upstream's data.split); every rank holds as many rows, so the
        # k-th mini-batches line up across ranks and their global token counts are all-reduced as usual
        micro = rows_per_micro_batch(
            data.batch["input_ids"].shape[-1], micro_batch_size=cfg.ppo_micro_batch_size_per_gpu,
            use_dynamic_bsz=bool(cfg.use_dynamic_bsz), max_token_len=cfg.ppo_max_token_len_per_gpu,
        )
        if unit > 1:
            micro = self._whole_units(micro, unit)
        temperature = float(data.meta_info.get("temperature", 1.0))
        data = self._select_for_update(data)
        lr = self.engine.get_lr()
        step_metrics: list[dict[str, float]] = []
        for epoch in range(int(cfg.ppo_epochs)):
            if cfg.shuffle:
                g = torch.Generator().manual_seed(int(data.meta_info.get("global_steps", 0)) * 1000 + epoch)
                units = torch.randperm(len(data) // unit, generator=g)  # whole units keep their rows together
                data = data.select_idxs((units[:, None] * unit + torch.arange(unit)).reshape(-1))
            for mb in data.split(mini):
                mask = response_mask_of(mb)
                info = GlobalBatchInfo.from_mask(mask)
                if self.engine.dp_size > 1:
                    info = info.all_reduce(group=self.engine.dp_group)
                micro_batches, _ = split_for_engine(
                    mb, self.engine, rows=micro, use_dynamic_bsz=bool(cfg.use_dynamic_bsz),
                    max_token_len=cfg.ppo_max_token_len_per_gpu,
                )
                per_micro = self.engine.forward_backward(
                    micro_batches, self._loss_fn(info), temperature=temperature,
                    calculate_entropy=self._update_entropy, entropy_grad=cfg.entropy_coeff != 0,
                )
                summed = _sum_over_ranks(per_micro, self.engine.dp_size, self.engine.dp_group)
                summed["grad_norm"] = self.engine.optimizer_step()
                step_metrics.append(summed)
        self.engine.lr_scheduler_step()
        # distillation's metrics keep upstream's top-level ``distillation/`` names
        result = {(k if k.startswith("distillation/") else f"actor/{k}"): sum(m[k] for m in step_metrics) / len(step_metrics)
                  for k in step_metrics[0]}
        result["actor/lr"] = lr
        return result

    def _mini_batch_rows(self, unit: int) -> int:
        """Rows per mini-batch on this rank: the constructor's ``ppo_mini_batch_size_per_rank``, or for a
        grouped layout (``rows_per_prompt`` = ``unit`` > 1) ``ppo_mini_batch_size`` prompts x ``unit``."""
        if unit < 1:
            raise ValueError(f"meta_info['rows_per_prompt']={unit} must be a positive number of rows")
        if unit == 1:
            mini = self.ppo_mini_batch_size_per_rank
            if mini is None or mini <= 0:
                raise ValueError(
                    "DataParallelPPOActor.update_policy needs ppo_mini_batch_size_per_rank "
                    "(= actor.ppo_mini_batch_size * rollout.n // dp_size), given to the constructor"
                )
            return mini
        prompts, dp = int(self.config.ppo_mini_batch_size), self.engine.dp_size
        if prompts % dp:
            raise ValueError(
                f"actor.ppo_mini_batch_size={prompts} prompts of {unit} rows each cannot be split over {dp} "
                "workers without splitting a prompt's rows; make it a multiple of the worker count"
            )
        return prompts // dp * unit

    def _whole_units(self, micro: int, unit: int) -> int:
        """Rows per micro-batch that hold whole units of ``unit`` rows (see the module doc)."""
        cfg = self.config
        if cfg.use_dynamic_bsz:
            if self.engine.remove_padding:
                raise NotImplementedError(
                    f"meta_info['rows_per_prompt']={unit} with use_dynamic_bsz and model.use_remove_padding: "
                    "packed token budgets regroup rows freely; set actor.use_dynamic_bsz=false"
                )
            return max(unit, micro - micro % unit)
        if micro % unit:
            raise ValueError(
                f"actor.ppo_micro_batch_size_per_gpu={micro} rows would split a prompt's {unit} rows "
                f"(meta_info['rows_per_prompt']={unit}); use a multiple of {unit}"
            )
        return micro


def _teacher_keys(distillation_loss: Any) -> list[str]:
    """The teacher's batch keys the loss reads: its log-probs, and its top-k ids for top-k losses."""
    from verl.trainer.ppo.distillation_losses import get_distillation_loss_settings

    use_topk = get_distillation_loss_settings(distillation_loss.loss_mode).use_topk
    return ["teacher_logprobs", "teacher_ids"] if use_topk else ["teacher_logprobs"]


def _distillation_term(out, mb, mask, pg_loss, distill, mode, weights, info, share, metrics) -> torch.Tensor:
    """The actor's loss with the distillation term (``verl.trainer.ppo.distillation_losses``); its metrics are
    added to ``metrics`` weighted by the micro-batch's token ``share``."""
    from verl.trainer.ppo.distillation_losses import combine_losses, compute_distillation_loss

    dev = out["log_probs"].device
    d_loss, d_metrics = compute_distillation_loss(
        student_log_probs=out["log_probs"], student_topk_log_probs=out.get("topk_log_probs"),
        teacher_log_probs=mb["teacher_logprobs"].to(dev), old_log_probs=mb["old_log_probs"].to(dev),
        response_mask=mask, loss_agg_mode=mode, config=distill, rollout_is_weights=weights, global_batch_info=info,
    )
    metrics["distillation/loss"] = float(d_loss.detach().item())
    metrics.update({k: float(v) * share for k, v in d_metrics.items()})
    return combine_losses(pg_loss, d_loss, distill)


def _response_mask(mb) -> torch.Tensor:
    if "response_mask" in mb:
        return mb["response_mask"]
    return mb["attention_mask"][:, -mb["responses"].shape[-1]:]


def _sum_over_ranks(per_micro: list[dict[str, Any]], dp_size: int, group=None) -> dict[str, float]:
    """Sum each metric over micro-batches and data-parallel ranks (``group``; None: the default group):
    every metric here is a share of a global value."""
    keys = sorted({k for m in per_micro for k in m if k != "loss"})
    local = torch.tensor([sum(m.get(k, 0.0) for m in per_micro) for k in keys], dtype=torch.float64)
    if dp_size > 1:
        dev = "cuda" if dist.get_backend(group) == "nccl" else "cpu"
        local = local.to(dev)
        dist.all_reduce(local, op=dist.ReduceOp.SUM, group=group)
    return {k: float(v) for k, v in zip(keys, local.cpu().tolist())}
