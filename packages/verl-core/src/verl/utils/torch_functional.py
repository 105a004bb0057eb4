"""Small tensor helpers shared by the RL algorithms and the workers (pure torch, no Ray).

Masks are 0/1 tensors broadcastable to the values (1 = a real token). Upstream names:
``masked_mean``, ``masked_sum``, ``masked_var``, ``masked_whiten``, ``entropy_from_logits``,
``clip_by_value``.
"""

from __future__ import annotations

import torch


def masked_sum(values: torch.Tensor, mask: torch.Tensor, axis: int | None = None) -> torch.Tensor:
    """Sum of ``values`` where ``mask`` is 1 (over all elements, or along ``axis``)."""
    prod = values * mask
    return prod.sum() if axis is None else prod.sum(dim=axis)


def masked_mean(values: torch.Tensor, mask: torch.Tensor, axis: int | None = None) -> torch.Tensor:
    """Mean of ``values`` where ``mask`` is 1. An all-zero mask gives 0, never NaN."""
    total = masked_sum(values, mask, axis)
    count = torch.ones_like(values) * mask  # the mask may broadcast against values
    count = count.sum() if axis is None else count.sum(dim=axis)
    # clamp: an empty selection (a fully padded row) contributes 0 instead of 0/0
    return total / count.clamp(min=1)


def masked_var(values: torch.Tensor, mask: torch.Tensor, unbiased: bool = True) -> torch.Tensor:
    """Variance of the masked elements (all of them, one scalar).

    ``unbiased`` applies Bessel's correction n/(n-1) when at least two elements are selected;
    a single selected element has variance 0. An empty mask is an error.
    """
    count = mask.sum()
    if count.item() == 0:
        raise ValueError(f"masked_var: the mask selects no element (values shape {tuple(values.shape)})")
    mean = masked_mean(values, mask)
    var = masked_mean((values - mean) ** 2, mask)
    if unbiased and count.item() > 1:
        var = var * count / (count - 1)
    return var


def masked_whiten(values: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True) -> torch.Tensor:
    """Normalise the masked elements to zero mean and unit variance (statistics over the mask only).

    With ``shift_mean=False`` the mean is added back (only the scale changes). Elements outside the
    mask are transformed too; callers multiply by the mask when they need zeros there.
    """
    mean = masked_mean(values, mask)
    var = masked_var(values, mask)
    whitened = (values - mean) * torch.rsqrt(var + 1e-8)
    if not shift_mean:
        whitened = whitened + mean
    return whitened


def clip_by_value(x: torch.Tensor, tensor_min: torch.Tensor, tensor_max: torch.Tensor) -> torch.Tensor:
    """Elementwise clamp of ``x`` into [tensor_min, tensor_max] (bounds may be tensors)."""
    return torch.maximum(torch.minimum(x, tensor_max), tensor_min)


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of softmax(logits) over the last dimension.

    Written as logsumexp(z) - sum(p * z) so large logits never overflow and no log(0) appears.
    """
    probs = torch.softmax(logits, dim=-1)
    return torch.logsumexp(logits, dim=-1) - (probs * logits).sum(dim=-1)


def logprobs_from_logits(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """log softmax(logits)[label] for every position: logits [..., V], labels [...] -> [...]."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    return logp.gather(-1, labels.unsqueeze(-1)).squeeze(-1)
