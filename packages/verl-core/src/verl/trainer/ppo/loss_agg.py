"""Loss aggregation that does not depend on how a batch is split across workers and micro-batches.

``agg_loss(loss_mat, loss_mask, loss_agg_mode, dp_size=1, batch_num_tokens=None, global_batch_size=None,
loss_scale_factor=None, *, global_batch_info=None)`` reduces a ``[B, T]`` per-token loss to a scalar.
Modes (upstream names):

- ``token-mean``: sum over all valid tokens / number of valid tokens.
- ``token-sum``: sum over all valid tokens.
- ``seq-mean-token-sum``: mean over sequences of each sequence's token sum.
- ``seq-mean-token-mean``: mean over sequences of each sequence's token mean.
- ``seq-mean-token-sum-norm`` (Dr.GRPO): mean over sequences of each sequence's token sum divided by a
  constant length (``loss_scale_factor``, default the padded length ``T``).

A "sequence" is a row with at least one valid token; fully padded rows are ignored.

How a worker keeps the loss independent of data-parallel size and micro-batching
--------------------------------------------------------------------------------
Without ``global_batch_info`` the normalisers (token count, sequence count) come from the tensor given,
so averaging per-micro-batch losses is only right when every micro-batch holds the same number of
tokens. To get the full mini-batch loss exactly:

1. on every rank, for the rank's share of the mini-batch: ``info = GlobalBatchInfo.from_mask(mask)``;
2. sum the counts over the data-parallel group: ``info = info.all_reduce(group)``;
3. for every micro-batch: ``loss = agg_loss(mat_k, mask_k, mode, global_batch_info=info)`` and
   ``loss.backward()`` (gradients accumulate; do not divide by the number of micro-batches).

Then the sum of these micro-batch losses over all micro-batches and all ranks equals
``agg_loss(full_mat, full_mask, mode)``. FSDP/DDP *average* gradients across ranks, so a worker that
relies on that averaging multiplies each micro-batch loss by ``dp_size`` before ``backward``.

Upstream verl spells the same thing ``agg_loss(mat_k, mask_k, mode, dp_size=n, batch_num_tokens=T,
global_batch_size=S, loss_scale_factor=c)`` and multiplies by ``dp_size`` inside; both spellings go
through one computation here, so ``agg_loss(..., dp_size=n, batch_num_tokens=T, ...) ==
n * agg_loss(..., global_batch_info=GlobalBatchInfo(T, S, c))``.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass, replace

import torch

LOSS_AGG_MODES = (
    "token-mean",
    "token-sum",
    "seq-mean-token-sum",
    "seq-mean-token-mean",
    "seq-mean-token-sum-norm",
)


@dataclass(frozen=True)
class GlobalBatchInfo:
    """Normalisers of the whole (mini-)batch, summed over every micro-batch on every worker.

    ``global_token_count``: valid tokens (sum of the loss mask); ``global_seq_count``: rows with at
    least one valid token; ``loss_scale_factor``: the constant length of ``seq-mean-token-sum-norm``
    (None = the padded length of the mask given to ``agg_loss``).
    """

    global_token_count: float
    global_seq_count: float
    loss_scale_factor: float | None = None

    @classmethod
    def from_mask(cls, loss_mask: torch.Tensor, loss_scale_factor: float | None = None) -> GlobalBatchInfo:
        """Counts of one ``[B, T]`` mask (a worker's share; combine shares with ``all_reduce``)."""
        mask = loss_mask.float()
        return cls(
            global_token_count=float(mask.sum().item()),
            global_seq_count=float((mask.sum(dim=-1) > 0).sum().item()),
            loss_scale_factor=loss_scale_factor,
        )

    def __add__(self, other: GlobalBatchInfo) -> GlobalBatchInfo:
        """Combine the counts of two disjoint parts of a batch."""
        if self.loss_scale_factor != other.loss_scale_factor:
            raise ValueError(
                f"cannot add GlobalBatchInfo with different loss_scale_factor "
                f"({self.loss_scale_factor} vs {other.loss_scale_factor})"
            )
        return replace(
            self,
            global_token_count=self.global_token_count + other.global_token_count,
            global_seq_count=self.global_seq_count + other.global_seq_count,
        )

    def all_reduce(self, group=None) -> GlobalBatchInfo:
        """Sum the counts over a ``torch.distributed`` process group (every rank must call it)."""
        import torch.distributed as dist

        counts = torch.tensor([self.global_token_count, self.global_seq_count], dtype=torch.float64)
        if dist.get_backend(group) == "nccl":
            counts = counts.cuda()
        dist.all_reduce(counts, op=dist.ReduceOp.SUM, group=group)
        return replace(self, global_token_count=float(counts[0]), global_seq_count=float(counts[1]))


def agg_loss(
    loss_mat: torch.Tensor,
    loss_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    dp_size: int = 1,
    batch_num_tokens: float | torch.Tensor | None = None,
    global_batch_size: float | torch.Tensor | None = None,
    loss_scale_factor: float | None = None,
    *,
    global_batch_info: GlobalBatchInfo | None = None,
) -> torch.Tensor:
    """Reduce a ``[B, T]`` loss to a scalar over the valid tokens of ``loss_mask`` (see module doc).

    Two spellings of the same normalisers:

    - ours: ``global_batch_info=GlobalBatchInfo(...)`` (keyword only). The token/sequence counts are
      the global ones and nothing is multiplied, so summing the results over the parts of a batch
      gives the loss of the whole batch.
    - upstream verl's: ``dp_size``, ``batch_num_tokens`` (valid tokens in the global batch),
      ``global_batch_size`` (sequences in the global batch), ``loss_scale_factor``. The result is
      multiplied by ``dp_size`` (FSDP/DDP then average the gradients back over the ranks); with
      ``dp_size > 1`` the global count the mode needs is required, as upstream.

    Without either, the normalisers come from ``loss_mask`` itself.
    """
    if loss_mat.shape != loss_mask.shape:
        raise ValueError(
            f"agg_loss: loss_mat shape {tuple(loss_mat.shape)} != loss_mask shape {tuple(loss_mask.shape)}"
        )
    if loss_agg_mode not in LOSS_AGG_MODES:
        raise ValueError(f"unknown loss_agg_mode {loss_agg_mode!r}; known: {', '.join(LOSS_AGG_MODES)}")
    if isinstance(dp_size, bool) or not isinstance(dp_size, numbers.Integral) or dp_size < 1:
        # catches the old positional call agg_loss(mat, mask, mode, info), which now lands in dp_size
        raise TypeError(
            f"agg_loss: dp_size must be a positive int, got {dp_size!r}; pass a GlobalBatchInfo as "
            f"global_batch_info=..."
        )
    if global_batch_info is not None:
        if dp_size != 1 or any(x is not None for x in (batch_num_tokens, global_batch_size, loss_scale_factor)):
            raise ValueError(
                "agg_loss: give either global_batch_info or upstream's dp_size/batch_num_tokens/"
                "global_batch_size/loss_scale_factor, not both"
            )
        token_count = global_batch_info.global_token_count
        seq_count = global_batch_info.global_seq_count
        scale = global_batch_info.loss_scale_factor
    else:
        if dp_size > 1 and loss_agg_mode != "token-sum":
            name = "batch_num_tokens" if loss_agg_mode == "token-mean" else "global_batch_size"
            if (batch_num_tokens if name == "batch_num_tokens" else global_batch_size) is None:
                raise ValueError(
                    f"agg_loss: loss_agg_mode={loss_agg_mode!r} with dp_size={dp_size} needs {name} "
                    f"(the count over the whole global batch)"
                )
        # None: count this mask (in _aggregate)
        token_count, seq_count, scale = batch_num_tokens, global_batch_size, loss_scale_factor
    return _aggregate(loss_mat, loss_mask, loss_agg_mode, token_count, seq_count, scale) * int(dp_size)


def _at_least_one(count: float | torch.Tensor) -> float | torch.Tensor:
    # an all-padding batch gives 0, not NaN
    return count.clamp(min=1) if isinstance(count, torch.Tensor) else max(float(count), 1.0)


def _aggregate(
    loss_mat: torch.Tensor,
    loss_mask: torch.Tensor,
    loss_agg_mode: str,
    token_count: float | torch.Tensor | None,
    seq_count: float | torch.Tensor | None,
    scale: float | None,
) -> torch.Tensor:
    """The one computation behind both spellings; a None count is taken from ``loss_mask``."""
    mask = loss_mask.to(loss_mat.dtype)
    masked = loss_mat * mask
    if loss_agg_mode == "token-sum":
        return masked.sum()
    if loss_agg_mode == "token-mean":
        return masked.sum() / _at_least_one(mask.sum() if token_count is None else token_count)
    seq_sums = masked.sum(dim=-1)
    tokens_per_seq = mask.sum(dim=-1)
    seq_count = _at_least_one((tokens_per_seq > 0).sum() if seq_count is None else seq_count)
    if loss_agg_mode == "seq-mean-token-sum":
        return seq_sums.sum() / seq_count
    if loss_agg_mode == "seq-mean-token-mean":
        return (seq_sums / tokens_per_seq.clamp(min=1)).sum() / seq_count
    # seq-mean-token-sum-norm
    scale = scale if scale is not None else loss_mask.shape[-1]
    return seq_sums.sum() / (seq_count * scale)
