"""Triton backend of the fused log-prob/entropy (``model.fused_kernel_options.impl_backend=triton``).

Same chunked algorithm as :mod:`verl.workers.engine.fused_logprob` (the LM-head matmul of a chunk of tokens
stays a torch matmul); what Triton fuses is the per-row softmax work on the chunk's [C, V] fp32 logits.
The torch backend makes several [C, V] passes and temporaries (log_softmax, gather, exp, product, sum);
here one kernel streams each row once over vocabulary blocks with an online softmax and writes three
numbers per row, and one backward kernel writes the row's logit gradient directly:

    lse = logsumexp(z)    log-prob l = z_y - lse    entropy H = lse - sum_v p_v z_v
    dz  = g_l (onehot(y) - p) - g_H p (z - lse + H)

Triton compiles for CUDA GPUs. ``TRITON_INTERPRET=1`` runs the same kernels on CPU tensors (numpy), which
is how the tests check them against the torch backend here.
"""

from __future__ import annotations

import functools

import torch

BLOCK_V = 1024  # vocabulary entries per block (a power of two, as tl.arange needs)


@functools.cache
def _kernels():
    """The jitted kernels, built on first use (so TRITON_INTERPRET set before the first call applies)."""
    import triton
    import triton.language as tl

    @triton.jit
    def row_stats(z_ptr, labels_ptr, lse_ptr, logp_ptr, ent_ptr, V, stride, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        base = z_ptr + row * stride
        m = tl.full((), float("-inf"), tl.float32)
        s = tl.zeros((), tl.float32)  # sum exp(z - m)
        t = tl.zeros((), tl.float32)  # sum exp(z - m) * z
        for start in range(0, V, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            inside = cols < V
            z = tl.load(base + cols, mask=inside, other=float("-inf"))
            m_new = tl.maximum(m, tl.max(z, 0))
            scale = tl.exp(m - m_new)
            e = tl.where(inside, tl.exp(z - m_new), 0.0)
            s = s * scale + tl.sum(e, 0)
            t = t * scale + tl.sum(e * tl.where(inside, z, 0.0), 0)
            m = m_new
        lse = m + tl.log(s)
        label = tl.load(labels_ptr + row)
        z_label = tl.load(base + label)
        tl.store(lse_ptr + row, lse)
        tl.store(logp_ptr + row, z_label - lse)
        tl.store(ent_ptr + row, lse - t / s)

    @triton.jit
    def row_grad(z_ptr, labels_ptr, lse_ptr, ent_ptr, gl_ptr, gh_ptr, dz_ptr, V, stride, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        base = z_ptr + row * stride
        lse = tl.load(lse_ptr + row)
        ent = tl.load(ent_ptr + row)
        gl = tl.load(gl_ptr + row)
        gh = tl.load(gh_ptr + row)
        label = tl.load(labels_ptr + row)
        for start in range(0, V, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            inside = cols < V
            z = tl.load(base + cols, mask=inside, other=0.0)
            logp = z - lse
            p = tl.exp(logp)
            dz = gl * (tl.where(cols == label, 1.0, 0.0) - p) - gh * p * (logp + ent)
            tl.store(dz_ptr + row * stride + cols, dz, mask=inside)

    return row_stats, row_grad


def _check(z: torch.Tensor) -> None:
    if z.dtype != torch.float32 or not z.is_contiguous():
        raise ValueError(f"the triton fused kernel takes contiguous fp32 logits, got {z.dtype}")


def row_stats(z: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``z`` [C, V] fp32 -> (logsumexp, log-prob of ``labels``, entropy), each [C]."""
    _check(z)
    kernel, _ = _kernels()
    c, v = z.shape
    lse, logp, ent = (torch.empty(c, dtype=torch.float32, device=z.device) for _ in range(3))
    if c:
        kernel[(c,)](z, labels.contiguous(), lse, logp, ent, v, z.stride(0), BLOCK=min(BLOCK_V, _pow2(v)))
    return lse, logp, ent


def row_grad(
    z: torch.Tensor, labels: torch.Tensor, lse: torch.Tensor, ent: torch.Tensor, g_logp, g_ent
) -> torch.Tensor:
    """d(sum g_logp * log-prob + g_ent * entropy) / dz for ``z`` [C, V] fp32 (a None g is zero)."""
    _check(z)
    _, kernel = _kernels()
    c, v = z.shape
    zeros = torch.zeros(c, dtype=torch.float32, device=z.device)
    gl = zeros if g_logp is None else g_logp.to(torch.float32).contiguous()
    gh = zeros if g_ent is None else g_ent.to(torch.float32).contiguous()
    dz = torch.empty_like(z)
    if c:
        kernel[(c,)](
            z, labels.contiguous(), lse, ent, gl, gh, dz, v, z.stride(0), BLOCK=min(BLOCK_V, _pow2(v))
        )
    return dz


def _pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())
