"""Log-probs and entropy from vocab-parallel logits (each TP rank holds a slice of the vocabulary).

With tensor parallelism the output layer leaves logits split along the vocabulary: rank ``r`` holds
columns ``[start, start + V_r)`` of ``z``. Over the TP group, three all-reduces give everything:

    m = max_j z_j                        (MAX)
    s = sum_j exp(z_j - m)               (SUM)          log Z = m + log s
    t = z_target                         (SUM; only the owning rank contributes)
    e = sum_j exp(z_j - m) * z_j / s     (SUM)          = E_p[z]

    log p(target) = t - log Z            entropy H = log Z - E_p[z]

Gradients need no communication: with ``p_j = exp(z_j - m) / s`` on the local columns,
``d log p(target) / dz_j = [j == target] - p_j`` and ``dH / dz_j = p_j (E_p[z] - z_j)``. The backward
recomputes ``p`` from the saved logits (one [.., V_r] tensor kept, as the forward of the output layer
keeps its input anyway), so log-probs and entropy share one saved tensor.

Columns past the real vocabulary (the padding that makes it divisible by the TP size) are excluded.
"""

from __future__ import annotations

import torch
import torch.distributed as dist


def _all_reduce(t: torch.Tensor, op, group) -> torch.Tensor:
    if group is not None and dist.get_world_size(group) > 1:
        dist.all_reduce(t, op=op, group=group)
    return t


class _LogProbEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, target, vocab_start, vocab_size, group, with_entropy):
        width = logits.shape[-1]
        cols = torch.arange(vocab_start, vocab_start + width, device=logits.device)
        valid = cols < vocab_size
        z = logits.masked_fill(~valid, float("-inf")) if not bool(valid.all()) else logits
        m = _all_reduce(z.max(dim=-1).values, dist.ReduceOp.MAX, group)
        ez = torch.exp(z - m.unsqueeze(-1))
        s = _all_reduce(ez.sum(dim=-1), dist.ReduceOp.SUM, group)
        local = target - vocab_start
        owned = (local >= 0) & (local < width)
        picked = logits.gather(-1, local.clamp(0, width - 1).unsqueeze(-1)).squeeze(-1)
        t = _all_reduce(torch.where(owned, picked, torch.zeros_like(picked)), dist.ReduceOp.SUM, group)
        log_z = m + torch.log(s)
        log_prob = t - log_z
        if with_entropy:
            zz = torch.where(valid, logits, torch.zeros_like(logits))  # no -inf * 0
            e = _all_reduce((ez * zz).sum(dim=-1), dist.ReduceOp.SUM, group) / s
            entropy = log_z - e
        else:
            e = entropy = torch.zeros_like(log_prob)
        ctx.save_for_backward(logits, m, s, e, local, owned, valid)
        ctx.with_entropy = with_entropy
        return log_prob, entropy

    @staticmethod
    def backward(ctx, grad_log_prob, grad_entropy):
        logits, m, s, e, local, owned, valid = ctx.saved_tensors
        p = torch.exp(logits - m.unsqueeze(-1)) / s.unsqueeze(-1)
        p = p.masked_fill(~valid, 0.0)
        grad = torch.zeros_like(logits)
        if grad_log_prob is not None:
            grad -= grad_log_prob.unsqueeze(-1) * p
            hit = grad_log_prob * owned.to(grad_log_prob.dtype)
            grad.scatter_add_(-1, local.clamp(0, logits.shape[-1] - 1).unsqueeze(-1), hit.unsqueeze(-1))
        if ctx.with_entropy and grad_entropy is not None:
            zz = torch.where(valid, logits, torch.zeros_like(logits))
            grad += grad_entropy.unsqueeze(-1) * p * (e.unsqueeze(-1) - zz)
        return grad, None, None, None, None, None


def vocab_parallel_log_prob_entropy(
    logits: torch.Tensor, target: torch.Tensor, *, vocab_start: int, vocab_size: int, group=None,
    with_entropy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(log p(target), entropy or None)`` per position of vocab-parallel ``logits`` [..., V_r].

    ``vocab_start``: this rank's first vocabulary column; ``vocab_size``: the real vocabulary (columns
    at or past it are padding); ``group``: the TP process group (None: the logits are whole).
    """
    if logits.dtype != torch.float32:
        logits = logits.float()
    log_prob, entropy = _LogProbEntropy.apply(logits, target, int(vocab_start), int(vocab_size), group,
                                              bool(with_entropy))
    return log_prob, (entropy if with_entropy else None)
