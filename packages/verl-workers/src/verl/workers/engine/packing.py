"""Sequence packing (``model.use_remove_padding=True``): run real tokens only, outputs as if padded.

A micro-batch arrives padded ([B, P+R]: left-padded prompt, right-padded response). Its rows' real
tokens (contiguous in each row) are packed first-fit-decreasing into a few *packed rows* of width W
(at least the longest real row; see :func:`bin_width`), several sequences per packed row, position ids restarting at 0 for each
sequence. A block-diagonal causal 4D mask keeps attention inside each sequence: on CPU, sdpa and
eager attention do not infer sequence boundaries from ``position_ids`` (checked numerically in the
tests), so the mask is explicit. Attention then costs about (real tokens) x W instead of
B x (P+R)^2, and the MLP/projections see real tokens plus the bins' small remainder. (With
flash-attention kernels on GPU one row and ``position_ids`` alone would do; not done here.)

The per-response-token outputs are gathered back into the padded [B, R] layout; positions outside
``attention_mask`` hold 0 (the padded computation holds the model's output there, which every
consumer masks).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch


@dataclass
class PackPlan:
    """Where each padded row's real tokens live in the packed rows."""

    input_ids: torch.Tensor  # [nb, W]
    position_ids: torch.Tensor  # [nb, W]
    segment: torch.Tensor  # [nb, W] sequence number inside its packed row, -1 on fill
    row_bin: torch.Tensor  # [B] packed row of each original row
    row_start: torch.Tensor  # [B] offset of its first real token there
    first_real: torch.Tensor  # [B] padded column of its first real token


def first_fit_decreasing(lengths: list[int], capacity: int) -> list[list[int]]:
    """Group item indices into bins of total length <= ``capacity`` (longest first, first bin that fits)."""
    bins: list[list[int]] = []
    room: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda j: (-lengths[j], j)):
        if lengths[i] > capacity:
            raise ValueError(f"row {i} has {lengths[i]} tokens, more than the bin capacity {capacity}")
        for b, free in enumerate(room):
            if lengths[i] <= free:
                bins[b].append(i)
                room[b] -= lengths[i]
                break
        else:
            bins.append([i])
            room.append(capacity - lengths[i])
    return bins


#: extra attention work (relative to the projections and MLP) a packed row may add by being wide
ATTENTION_SHARE = 0.15


def bin_width(config: Any, longest: int) -> int:
    """Packed-row width: at least the longest row, wider while attention stays cheap.

    Wider rows pack more sequences (less fill) but the dense block mask makes attention cost
    ~ width per token. Per token and layer, attention costs ~4 * width * (heads * head_dim) FLOPs and
    the projections + MLP ~2 * (their parameters); the width is chosen so attention stays under
    :data:`ATTENTION_SHARE` of the latter (configs without these sizes: the longest row).
    """
    try:
        hidden, heads, inter = (
            int(config.hidden_size),
            int(config.num_attention_heads),
            int(config.intermediate_size),
        )
    except (AttributeError, TypeError):
        return longest
    head_dim = int(getattr(config, "head_dim", None) or hidden // heads)
    kv = int(getattr(config, "num_key_value_heads", None) or heads)
    layer_params = hidden * head_dim * (2 * heads + 2 * kv) + 3 * hidden * inter
    return max(longest, int(ATTENTION_SHARE * 2 * layer_params / (4 * heads * head_dim)))


def plan_packing(
    input_ids: torch.Tensor, attention_mask: torch.Tensor, pad_token_id: int = 0, width: int | None = None
) -> PackPlan:
    """Pack the real tokens of ``input_ids`` [B, L] (``attention_mask`` 1 on a contiguous run per row)
    into rows of ``width`` tokens (default: the longest row)."""
    mask = attention_mask.bool()
    lengths = mask.sum(-1)
    first = mask.int().argmax(-1)
    if not torch.equal(
        mask.int().cumsum(-1).gather(-1, (first + lengths - 1).clamp(min=0)[:, None])[:, 0], lengths
    ):
        raise ValueError(
            "use_remove_padding needs each row's real tokens to be contiguous (left/right padding only)"
        )
    lens = lengths.tolist()
    width = max(max(lens), 1, width or 0)
    bins = first_fit_decreasing(lens, width)
    nb = len(bins)
    ids = torch.full((nb, width), pad_token_id, dtype=input_ids.dtype, device=input_ids.device)
    pos = torch.zeros((nb, width), dtype=torch.long, device=input_ids.device)
    seg = torch.full((nb, width), -1, dtype=torch.long, device=input_ids.device)
    row_bin = torch.empty(len(lens), dtype=torch.long)
    row_start = torch.empty(len(lens), dtype=torch.long)
    for b, rows in enumerate(bins):
        offset = 0
        for s, i in enumerate(rows):
            n, f = lens[i], int(first[i])
            ids[b, offset : offset + n] = input_ids[i, f : f + n]
            pos[b, offset : offset + n] = torch.arange(n)
            seg[b, offset : offset + n] = s
            row_bin[i], row_start[i] = b, offset
            offset += n
    return PackPlan(ids, pos, seg, row_bin.to(input_ids.device), row_start.to(input_ids.device), first)


def block_causal_mask(segment: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """[nb, 1, W, W] mask: a token sees earlier tokens of its own sequence (fill tokens see themselves).

    Boolean (True = attend) when ``dtype`` is None, else additive (0 / dtype's min) for eager attention.
    """
    w = segment.shape[-1]
    causal = torch.ones((w, w), dtype=torch.bool, device=segment.device).tril()
    same = segment[:, :, None] == segment[:, None, :]
    allowed = (same & causal & (segment[:, :, None] >= 0)) | torch.eye(
        w, dtype=torch.bool, device=segment.device
    )
    allowed = allowed[:, None]
    if dtype is None:
        return allowed
    return torch.zeros(allowed.shape, dtype=dtype, device=segment.device).masked_fill(
        ~allowed, torch.finfo(dtype).min
    )


def response_index(plan: PackPlan, attention_mask: torch.Tensor, n_resp: int) -> tuple[torch.Tensor, ...]:
    """For every response column, the packed (row, column) whose output predicts it, and validity.

    Returns ``(bins [B, R], cols [B, R], valid [B, R])``; invalid entries point at (row's bin, 0).
    """
    length = attention_mask.shape[-1]
    resp_cols = torch.arange(length - n_resp, length, device=attention_mask.device)
    # padded column c is predicted by column c-1: offset (c - 1 - first_real) in the row's sequence
    offset = resp_cols[None, :] - 1 - plan.first_real[:, None]
    valid = attention_mask[:, -n_resp:].bool() & (offset >= 0)
    cols = torch.where(valid, plan.row_start[:, None] + offset, torch.zeros_like(offset))
    bins = plan.row_bin[:, None].expand_as(cols)
    return bins, cols, valid
