"""Fused LM head + log-prob/entropy (``model.use_fused_kernels``): never holds [tokens, vocab] logits.

The unfused path runs ``lm_head`` over every token ([T, V] logits, in fp32 another [T, V], plus the
softmax intermediates autograd keeps for backward). Here the hidden states [T, H] are taken a chunk of
``chunk_size`` tokens at a time: logits of the chunk, divided by the temperature (as the unfused path
does), give the label's log-prob and the entropy, and the chunk's logits are freed. Backward recomputes
each chunk's logits from the saved hidden states and weight (one extra matmul per chunk) and
accumulates the gradients of both. Peak extra memory is then O(chunk_size x V) instead of O(T x V).

Gradients, with z = h W^T / temperature, p = softmax(z), log-prob l = z_y - logsumexp(z) and entropy
H = -sum p log p::

    dl/dz = onehot(y) - p            dH/dz = -p * (log p + H)

``impl_backend=torch`` (default) is pure PyTorch: runs on CPU and GPU alike; ``impl_backend=triton`` does the
per-row softmax work in Triton kernels (:mod:`verl.workers.engine.fused_logprob_triton`, GPU). Numerics are fp32 (the softmax in fp32 whatever the
weight dtype), matching the unfused ``logits.float() / temperature``.
"""

from __future__ import annotations

import torch

#: tokens per chunk (upstream's default): [chunk, V] fp32 logits is 128 MiB at V = 64k
DEFAULT_CHUNK_SIZE = 512
#: model.fused_kernel_options.impl_backend values (upstream's)
BACKENDS = ("torch", "triton")


def _stats_dtype(h: torch.Tensor) -> torch.dtype:
    return torch.promote_types(h.dtype, torch.float32)  # fp32, or fp64 for fp64 inputs


def _chunk_stats(h: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor, temperature: float):
    """fp32 logits / temperature of a chunk, its log-softmax, the label log-probs and entropies."""
    z = (h @ weight.t()).to(_stats_dtype(h)) / temperature
    logp = torch.log_softmax(z, dim=-1)
    label_logp = logp.gather(-1, labels[:, None])[:, 0]
    entropy = -(logp.exp() * logp).sum(-1)
    return logp, label_logp, entropy


def _triton_grad_z(h, weight, labels, temperature: float, g_logp, g_ent) -> torch.Tensor:
    """The torch backward's ``grad_z`` from the Triton row kernels (impl_backend=triton)."""
    from verl.workers.engine import fused_logprob_triton as tk

    z = ((h @ weight.t()).to(torch.float32) / temperature).contiguous()
    lse, _, ent = tk.row_stats(z, labels)
    return tk.row_grad(z, labels, lse, ent, g_logp, g_ent)


class FusedLinearLogProbEntropy(torch.autograd.Function):
    """``(hidden [T, H], weight [V, H], labels [T]) -> (log_probs [T], entropy [T])`` in fp32.

    ``backend``: ``torch`` (the softmax statistics in torch ops) or ``triton`` (one Triton kernel per
    pass over the chunk's logits, :mod:`verl.workers.engine.fused_logprob_triton`; fp32 only)."""

    @staticmethod
    def forward(ctx, hidden, weight, labels, temperature: float, chunk_size: int, backend: str = "torch"):
        ctx.set_materialize_grads(False)
        n = hidden.shape[0]
        log_probs = torch.empty(n, dtype=_stats_dtype(hidden), device=hidden.device)
        entropy = torch.empty_like(log_probs)
        for s in range(0, n, chunk_size):
            e = min(s + chunk_size, n)
            if backend == "triton":
                from verl.workers.engine.fused_logprob_triton import row_stats

                z = ((hidden[s:e] @ weight.t()).to(torch.float32) / temperature).contiguous()
                _, log_probs[s:e], entropy[s:e] = row_stats(z, labels[s:e])
            else:
                _, log_probs[s:e], entropy[s:e] = _chunk_stats(hidden[s:e], weight, labels[s:e], temperature)
        ctx.save_for_backward(hidden, weight, labels)
        ctx.temperature, ctx.chunk_size, ctx.backend = temperature, chunk_size, backend
        return log_probs, entropy

    @staticmethod
    def backward(ctx, grad_logp, grad_entropy):
        hidden, weight, labels = ctx.saved_tensors
        temperature, chunk_size = ctx.temperature, ctx.chunk_size
        need_h, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        grad_h = torch.empty_like(hidden) if need_h else None
        grad_w = (
            torch.zeros(weight.shape, dtype=_stats_dtype(hidden), device=weight.device) if need_w else None
        )
        if grad_logp is None and grad_entropy is None:
            return None, None, None, None, None, None
        for s in range(0, hidden.shape[0], chunk_size):
            e = min(s + chunk_size, hidden.shape[0])
            h = hidden[s:e]
            if ctx.backend == "triton":
                g_l = None if grad_logp is None else grad_logp[s:e]
                g_h = None if grad_entropy is None else grad_entropy[s:e]
                grad_z = _triton_grad_z(h, weight, labels[s:e], temperature, g_l, g_h)
                _accumulate(grad_z, h, weight, temperature, grad_h, grad_w, s, e)
                continue
            logp, _, ent = _chunk_stats(h, weight, labels[s:e], temperature)
            p = logp.exp()
            grad_z = torch.zeros_like(logp)
            if grad_logp is not None:
                g = grad_logp[s:e].to(p.dtype)
                grad_z -= g[:, None] * p
                grad_z.scatter_add_(-1, labels[s:e, None], g[:, None])
            if grad_entropy is not None:
                grad_z -= grad_entropy[s:e].to(p.dtype)[:, None] * p * (logp + ent[:, None])
            del logp, p
            _accumulate(grad_z, h, weight, temperature, grad_h, grad_w, s, e)
        return grad_h, grad_w.to(weight.dtype) if need_w else None, None, None, None, None


def _accumulate(grad_z, h, weight, temperature: float, grad_h, grad_w, s: int, e: int) -> None:
    """Chain rule through z = h W^T / temperature into the hidden states' and the weight's gradients."""
    grad_z = (grad_z / temperature).to(h.dtype)
    if grad_h is not None:
        grad_h[s:e] = grad_z @ weight.to(h.dtype)
    if grad_w is not None:
        grad_w += (grad_z.t() @ h).to(grad_w.dtype)


def fused_log_prob_entropy(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    labels: torch.Tensor,
    temperature: float = 1.0,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    backend: str = "torch",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-prob of ``labels`` and entropy under ``softmax(hidden @ weight.T / temperature)``, chunked.

    ``hidden`` [..., H], ``labels`` [...] (any leading shape), ``weight`` [V, H] (the LM head's; no
    bias). Returns two fp32 tensors of the leading shape (fp64 for fp64 inputs).
    """
    if temperature <= 0:
        raise ValueError(f"temperature={temperature} must be > 0 to compute log-probs")
    if chunk_size <= 0:
        raise ValueError(f"chunk_size={chunk_size} must be a positive number of tokens")
    if backend not in BACKENDS:
        raise ValueError(f"fused_kernel_options.impl_backend={backend!r}; known: {', '.join(BACKENDS)}")
    if backend == "triton" and _stats_dtype(hidden) != torch.float32:
        raise ValueError(f"impl_backend=triton computes in fp32; the hidden states are {hidden.dtype}")
    if hidden.shape[:-1] != labels.shape:
        raise ValueError(f"hidden states {tuple(hidden.shape)} and labels {tuple(labels.shape)} do not match")
    lead = labels.shape
    logp, ent = FusedLinearLogProbEntropy.apply(
        hidden.reshape(-1, hidden.shape[-1]),
        weight,
        labels.reshape(-1),
        float(temperature),
        int(chunk_size),
        backend,
    )
    return logp.view(lead), ent.view(lead)
