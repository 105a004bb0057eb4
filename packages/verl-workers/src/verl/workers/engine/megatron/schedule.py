"""Micro-batches through Megatron-Core's pipeline schedules (1F1B, interleaved, or none for PP=1).

**Padding.** Batches arrive left-padded (prompt) and right-padded (response), with ``position_ids``
counting real tokens from 0. Megatron's RoPE uses the token's column as its position, so each row's
real tokens are shifted to start at column 0 (:func:`prepare_micro_batch`): positions then equal the
HF ``position_ids``, every padding token sits after the row's real tokens, and a plain causal mask is
the whole attention mask (a real token never sees padding). The micro-batch is trimmed to its
longest row (rounded up to the TP size under sequence parallelism); widths and row counts may differ
between micro-batches (``variable_seq_lengths``: the pipeline exchanges shapes).

**Outputs.** On the last stage the logits (vocab-parallel) at the positions that predict the response
tokens give log-probs and entropies (:mod:`.vocab_parallel`), the value head gives values; positions
outside ``attention_mask`` hold 0. Other stages get them by broadcast (:func:`broadcast_from_last_stage`).

**Loss scale.** ``loss_fn`` returns this rank's share of a sum over micro-batches and data-parallel
ranks; Megatron divides the returned loss by the number of micro-batches and its DDP averages
gradients over the data-parallel group, so the loss handed to the schedule is multiplied by both.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist


@dataclass
class PreparedMicroBatch:
    tokens: torch.Tensor  # [B, W] real tokens from column 0
    position_ids: torch.Tensor  # [B, W]
    attention_mask: torch.Tensor  # [1, 1, W, W] bool, True = masked (Megatron's convention)
    gather_pos: torch.Tensor  # [B, R] column whose output predicts response token j
    valid: torch.Tensor  # [B, R] bool
    responses: torch.Tensor  # [B, R]
    source: Mapping[str, torch.Tensor]  # the micro-batch as given (what loss_fn reads)


def prepare_micro_batch(mb: Mapping[str, torch.Tensor], device: torch.device, width_multiple: int = 1) -> PreparedMicroBatch:
    """Left-align the real tokens of a padded micro-batch (see module doc)."""
    input_ids, mask = mb["input_ids"], mb["attention_mask"].bool()
    responses = mb["responses"]
    n_rows, length = input_ids.shape
    n_resp = responses.shape[-1]
    if length <= n_resp:
        raise ValueError(
            f"input_ids has {length} columns but responses has {n_resp}: input_ids must be "
            f"cat(prompts, responses) with at least one prompt column"
        )
    lengths = mask.sum(-1)
    first = mask.int().argmax(-1)
    cols = torch.arange(length)
    inside = (cols[None, :] >= first[:, None]) & (cols[None, :] < (first + lengths)[:, None])
    if not torch.equal(inside, mask):
        raise ValueError("strategy=megatron needs each row's real tokens to be contiguous (left/right padding only)")
    width = max(int(lengths.max()), 1)
    width = -(-width // width_multiple) * width_multiple
    src = (first[:, None] + torch.arange(width)[None, :]).clamp(max=length - 1)
    real = torch.arange(width)[None, :] < lengths[:, None]
    tokens = torch.where(real, input_ids.gather(1, src), torch.zeros_like(src))
    pos = torch.where(real, mb["position_ids"].gather(1, src), torch.zeros_like(src))
    expected = torch.where(real, torch.arange(width)[None, :].expand_as(pos), torch.zeros_like(pos))
    if not torch.equal(pos, expected):
        raise ValueError(
            "strategy=megatron applies RoPE by column, so each row's position_ids must count its real "
            "tokens from 0 (clip(cumsum(attention_mask) - 1, 0)); this batch's do not"
        )
    # response column c (absolute) is predicted by absolute column c - 1, i.e. shifted column c - 1 - first
    resp_cols = torch.arange(length - n_resp, length)
    gather = resp_cols[None, :] - 1 - first[:, None]
    valid = mask[:, -n_resp:] & (gather >= 0) & (gather < lengths[:, None])
    gather = torch.where(valid, gather, torch.zeros_like(gather))
    causal = torch.ones(width, width, dtype=torch.bool, device=device).triu(1)[None, None]
    return PreparedMicroBatch(
        tokens=tokens.to(device), position_ids=pos.to(device), attention_mask=causal,
        gather_pos=gather.to(device), valid=valid.to(device), responses=responses.to(device), source=mb,
    )


@dataclass(frozen=True)
class OutputSpec:
    """How the last stage turns the model's output into per-response-token outputs."""

    model_type: str  # causal_lm | value
    temperature: float
    calculate_entropy: bool
    entropy_grad: bool
    vocab_start: int  # this TP rank's first vocabulary column
    vocab_size: int  # the real vocabulary (padding columns excluded)
    tp_group: Any


def response_outputs(output: torch.Tensor, mb: PreparedMicroBatch, spec: OutputSpec) -> dict[str, torch.Tensor]:
    """``{"log_probs"[, "entropys"]}`` or ``{"values"}`` [B, R] from the last stage's output [B, W, *]."""
    from verl.workers.engine.megatron.vocab_parallel import vocab_parallel_log_prob_entropy

    index = mb.gather_pos.unsqueeze(-1).expand(-1, -1, output.shape[-1])
    picked = output.gather(1, index)  # [B, R, V_r] or [B, R, 1]
    if spec.model_type == "value":
        return {"values": picked[..., 0].float().masked_fill(~mb.valid, 0.0)}
    logits = picked.float() / spec.temperature
    log_prob, entropy = vocab_parallel_log_prob_entropy(
        logits, mb.responses, vocab_start=spec.vocab_start, vocab_size=spec.vocab_size, group=spec.tp_group,
        with_entropy=spec.calculate_entropy,
    )
    out = {"log_probs": log_prob.masked_fill(~mb.valid, 0.0)}
    if spec.calculate_entropy:
        # a metric only: no gradient flows back through it (both outputs share one saved tensor)
        entropy = entropy if spec.entropy_grad else entropy.detach()
        out["entropys"] = entropy.masked_fill(~mb.valid, 0.0)
    return out


def run_schedule(
    chunks: list[torch.nn.Module],
    micro_batches: Sequence[PreparedMicroBatch],
    spec: OutputSpec,
    *,
    forward_only: bool,
    loss_fn: Callable | None = None,
    loss_scale: float = 1.0,
) -> list[dict[str, Any]]:
    """Run every micro-batch through the pipeline; returns, on the last stage, one dict per
    micro-batch: ``{"outputs": {...}}`` (``forward_only``) or ``loss_fn``'s metrics with ``"loss"``.
    Other stages return ``[]``. ``loss_scale`` multiplies the loss given to the schedule (module doc)."""
    from megatron.core.pipeline_parallel import get_forward_backward_func

    n_micro = len(micro_batches)

    def loss_func(mb: PreparedMicroBatch, output: torch.Tensor):
        outs = response_outputs(output, mb, spec)
        if forward_only:
            return output.new_zeros(()), {"outputs": {k: v.detach() for k, v in outs.items()}}
        loss, metrics = loss_fn(outs, mb.source)
        # float() now: the schedule divides the returned tensor in place
        metrics = {**metrics, "loss": float(loss.detach().item())}
        return loss * (n_micro * loss_scale), metrics

    def forward_step(data_iterator, model):
        mb = next(data_iterator)
        output = model(input_ids=mb.tokens, position_ids=mb.position_ids, attention_mask=mb.attention_mask)
        return output, functools.partial(loss_func, mb)

    iterators = [iter(micro_batches) for _ in chunks]
    forward_backward = get_forward_backward_func()
    return forward_backward(
        forward_step_func=forward_step,
        data_iterator=iterators if len(chunks) > 1 else iterators[0],
        model=chunks if len(chunks) > 1 else chunks[0],
        num_microbatches=n_micro,
        seq_length=max(int(mb.tokens.shape[1]) for mb in micro_batches),
        micro_batch_size=max(int(mb.tokens.shape[0]) for mb in micro_batches),
        forward_only=forward_only,
    )


def broadcast_from_last_stage(tensors: dict[str, torch.Tensor], shapes: dict[str, tuple[int, ...]],
                              device: torch.device) -> dict[str, torch.Tensor]:
    """The last pipeline stage's ``tensors`` (float32, of known ``shapes``) on every stage (CPU)."""
    from megatron.core import parallel_state as mpu

    if mpu.get_pipeline_model_parallel_world_size() == 1:
        return {k: v.cpu() for k, v in tensors.items()}
    last = mpu.is_pipeline_last_stage()
    src = mpu.get_pipeline_model_parallel_last_rank()
    out = {}
    for key in sorted(shapes):
        buf = tensors[key].to(device) if last else torch.empty(shapes[key], dtype=torch.float32, device=device)
        dist.broadcast(buf, src=src, group=mpu.get_pipeline_model_parallel_group())
        out[key] = buf.cpu()
    return out


def broadcast_objects_from_last_stage(objs: list[Any]) -> list[Any]:
    """The last pipeline stage's picklable ``objs`` on every stage (the metrics of ``loss_fn``)."""
    from megatron.core import parallel_state as mpu

    if mpu.get_pipeline_model_parallel_world_size() == 1:
        return objs
    holder = [objs if mpu.is_pipeline_last_stage() else None]
    dist.broadcast_object_list(holder, src=mpu.get_pipeline_model_parallel_last_rank(),
                               group=mpu.get_pipeline_model_parallel_group())
    return holder[0]
