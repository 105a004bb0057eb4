"""One decode step of the native rollout (:mod:`verl.workers.rollout.native_rollout`): one new token
per row through every layer, with as few tensor ops per layer as the math allows.

At decode's sizes (64 rows, hidden 256..896, one CPU thread) a layer's matmuls run near the machine's
matmul rate and everything else is small elementwise work whose cost is mostly per-op overhead, so
this path cuts ops and allocations rather than FLOPs (``benchmarks/decode_floor.py``):

- activations are 2-D ``[rows, features]`` (no length-1 time dim to reshape around);
- the RMSNorm is written out with in-place ops on its own buffer (torch's ``rms_norm`` is a composite
  of the same ops on CPU, plus copies); residual adds are fused into the projection (``addmm_``);
- rotary is ``addcmul(x * cos, roll(x), sin_signed)`` and writes the keys straight into the cache;
- attention is two ``bmm`` calls over ``[rows * kv_heads, group, positions]`` (query heads sharing a
  kv head stacked in HF's ``repeat_kv`` order, so no key/value copies), the scale and the padding
  bias applied inside the first one (``baddbmm``).

The numbers are HF's up to float rounding order (the greedy and log-prob tests compare against HF).

:func:`decode_step_compiled` is the same step through ``torch.compile`` (``actor.use_torch_compile``, see
:mod:`verl.workers.engine.compile`): per layer two compiled regions around the cache write, each one
graph shared by every layer, with rows, positions and cache length dynamic (one compilation per
generation shape family, not per step). In them inductor fuses the norm, rotary, SwiGLU and residual
work into a few loops around the matmuls, and attention over the cache becomes two fused reductions
that read each cached key and value once (in bf16 that is half the bytes of fp32, and no per-(row,
head) GEMM call). The cache is written between the regions, in place: written inside a compiled
region it would be copied whole at every step.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from verl.workers.engine import compile as engine_compile

if TYPE_CHECKING:
    from verl.workers.rollout.native_rollout import DecoderWeights


def rms_last(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """HF's RMSNorm over the last dim: ``weight * (x * rsqrt(mean(x^2) + eps))`` in float32."""
    if x.dtype != torch.float32:  # HF normalises in float32 and casts back before the scale
        return weight * F.rms_norm(x.float(), (x.shape[-1],), eps=eps).to(x.dtype)
    r = torch.mul(x, x).mean(-1, keepdim=True).add_(eps).rsqrt_()
    return torch.mul(x, r).mul_(weight)


def _add_projection(hidden: torch.Tensor, x: torch.Tensor, w_t: torch.Tensor) -> None:
    """``hidden += x @ w_t`` in place. In float32 as one ``addmm_`` (the sum is rounded once either
    way); in half precision HF rounds the projection to the dtype before the add, so do the same."""
    if hidden.dtype == torch.float32:
        hidden.addmm_(x, w_t)
    else:
        hidden.add_(torch.mm(x, w_t))


def decode_step(
    w: DecoderWeights,
    tok: torch.Tensor,
    cos: torch.Tensor,
    sin_signed: torch.Tensor,
    cache: torch.Tensor,
    pos: int,
    key_bias: torch.Tensor,
) -> torch.Tensor:
    """Feed ``tok`` [B] at cache position ``pos`` and return the logits [B, V] of the next token.

    ``cos``/``sin_signed``: [B, head_dim] at ``pos`` (``sin_signed``: sin with its first half
    negated, see ``native_rollout._rotate``); ``cache``: [L, 2, B, kv_heads, S, head_dim], written in
    place at ``pos``; ``key_bias``: [B, pos + 1], 0 where a key may be attended to and -inf elsewhere.
    """
    b = tok.shape[0]
    nh, nkv, d = w.n_heads, w.n_kv_heads, w.head_dim
    group, t = nh // nkv, pos + 1
    half = d // 2
    cos, sin_signed = cos.unsqueeze(1), sin_signed.unsqueeze(1)  # over heads
    # the padding bias of every (row, kv head), once per step for all layers
    bias = key_bias.unsqueeze(1).expand(b, nkv, t).reshape(b * nkv, 1, t)
    hidden = F.embedding(tok, w.embed)  # [B, hidden], a fresh buffer the residual adds go into
    for i, layer in enumerate(w.layers):
        h = rms_last(hidden, layer.ln1, w.eps)
        if layer.b_qkv is None:
            qkv = torch.mm(h, layer.w_qkv)
        else:
            qkv = torch.addmm(layer.b_qkv, h, layer.w_qkv)
        qkv = qkv.view(b, nh + 2 * nkv, d)
        k_slot, v_slot = cache[i, 0, :, :, pos], cache[i, 1, :, :, pos]  # [B, kv_heads, d] views
        if layer.q_norm is None:
            x = qkv[:, : nh + nkv]
            qk = torch.addcmul(x * cos, x.roll(half, dims=-1), sin_signed)
            q = qk[:, :nh]
            k_slot.copy_(qk[:, nh:])
        else:
            q = rms_last(qkv[:, :nh], layer.q_norm, w.eps)
            q = torch.addcmul(q * cos, q.roll(half, dims=-1), sin_signed)
            k = rms_last(qkv[:, nh : nh + nkv], layer.k_norm, w.eps)
            torch.addcmul(k * cos, k.roll(half, dims=-1), sin_signed, out=k_slot)
        v_slot.copy_(qkv[:, nh + nkv :])
        keys = cache[i, 0, :, :, :t].reshape(b * nkv, t, d)  # views: rows and heads collapse
        values = cache[i, 1, :, :, :t].reshape(b * nkv, t, d)
        scores = torch.baddbmm(bias, q.reshape(b * nkv, group, d), keys.transpose(1, 2), alpha=w.scaling)
        out = torch.bmm(torch.softmax(scores, dim=-1), values)  # [B * kv_heads, group, d]
        _add_projection(hidden, out.view(b, nh * d), layer.w_o)
        h = rms_last(hidden, layer.ln2, w.eps)
        gate_up = torch.mm(h, layer.w_gate_up)
        gate, up = gate_up.chunk(2, dim=-1)
        _add_projection(hidden, F.silu(gate, inplace=True).mul_(up), layer.w_down)
    return torch.mm(rms_last(hidden, w.norm, w.eps), w.lm_head)


def _rms(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    # HF's RMSNorm: normalise in float32, cast back, then scale
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * weight


def _pre_attention(
    hidden: torch.Tensor,
    cos: torch.Tensor,
    sin_signed: torch.Tensor,
    ln1: torch.Tensor,
    w_qkv: torch.Tensor,
    b_qkv: torch.Tensor | None,
    q_norm: torch.Tensor | None,
    k_norm: torch.Tensor | None,
    n_heads: int,
    n_kv: int,
    eps: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Norm, q/k/v projection and rotary of one layer's decode step: q [B, heads, d], k and v
    [B, kv_heads, d] (the caller writes k and v into the cache)."""
    b, d = cos.shape
    h = _rms(hidden, ln1, eps)
    qkv = torch.mm(h, w_qkv) if b_qkv is None else torch.addmm(b_qkv, h, w_qkv)
    qkv = qkv.view(b, n_heads + 2 * n_kv, d)
    cos, sin_signed = cos.unsqueeze(1), sin_signed.unsqueeze(1)
    if q_norm is None:
        x = qkv[:, : n_heads + n_kv]
        qk = x * cos + x.roll(d // 2, dims=-1) * sin_signed
        q, k = qk[:, :n_heads], qk[:, n_heads:]
    else:
        q = _rms(qkv[:, :n_heads], q_norm, eps)
        k = _rms(qkv[:, n_heads : n_heads + n_kv], k_norm, eps)
        q = q * cos + q.roll(d // 2, dims=-1) * sin_signed
        k = k * cos + k.roll(d // 2, dims=-1) * sin_signed
    return q, k, qkv[:, n_heads + n_kv :]


def _post_attention(
    hidden: torch.Tensor,
    q: torch.Tensor,
    layer_cache: torch.Tensor,
    bias: torch.Tensor,
    w_o: torch.Tensor,
    ln2: torch.Tensor,
    w_gate_up: torch.Tensor,
    w_down: torch.Tensor,
    eps: float,
    scaling: float,
) -> torch.Tensor:
    """Attention of q over the first ``bias.shape[1]`` cached positions of ``layer_cache``
    [2, B, kv_heads, S, d] (``bias`` [B, t]: 0 or -inf per key), the output projection, the MLP and
    both residual adds; returns the layer's output hidden states [B, hidden]."""
    b, t = bias.shape
    n_kv, d = layer_cache.shape[2], layer_cache.shape[4]
    n_heads = q.shape[1]
    keys, values = layer_cache[0, :, :, :t], layer_cache[1, :, :, :t]  # [B, kv_heads, t, d]
    qg = q.reshape(b, n_kv, n_heads // n_kv, 1, d)  # query heads sharing a kv head, HF's repeat_kv order
    scores = (qg.float() * keys.unsqueeze(2).float()).sum(-1) * scaling + bias[:, None, None, :].float()
    probs = torch.softmax(scores, dim=-1)  # [B, kv_heads, group, t]
    out = (probs.unsqueeze(-1) * values.unsqueeze(2).float()).sum(-2)
    out = out.to(hidden.dtype).reshape(b, n_heads * d)
    hidden = hidden + torch.mm(out, w_o)
    gate, up = torch.mm(_rms(hidden, ln2, eps), w_gate_up).chunk(2, dim=-1)
    return hidden + torch.mm(F.silu(gate) * up, w_down)


@functools.cache
def _compiled_regions(backend: str):
    return torch.compile(_pre_attention, backend=backend), torch.compile(_post_attention, backend=backend)


def decode_step_compiled(
    w: DecoderWeights,
    tok: torch.Tensor,
    cos: torch.Tensor,
    sin_signed: torch.Tensor,
    cache: torch.Tensor,
    pos: int,
    key_bias: torch.Tensor,
) -> torch.Tensor:
    """:func:`decode_step` through the compiled regions (same arguments, same result up to rounding)."""
    pre, post = _compiled_regions(engine_compile.BACKEND)
    mark = torch._dynamo.maybe_mark_dynamic
    hidden = F.embedding(tok, w.embed)
    bias = key_bias.contiguous()  # [B, pos + 1]; contiguous, so its stride never depends on the cache length
    for t, dims in ((hidden, (0,)), (cos, (0,)), (sin_signed, (0,)), (bias, (0, 1))):
        for dim in dims:
            mark(t, dim)
    for i, layer in enumerate(w.layers):
        q, k, v = pre(
            hidden, cos, sin_signed, layer.ln1, layer.w_qkv, layer.b_qkv, layer.q_norm, layer.k_norm,
            w.n_heads, w.n_kv_heads, w.eps,
        )
        cache[i, 0, :, :, pos].copy_(k)
        cache[i, 1, :, :, pos].copy_(v)
        layer_cache = cache[i]
        mark(layer_cache, 1)
        mark(layer_cache, 3)
        hidden = post(
            hidden, q, layer_cache, bias, layer.w_o, layer.ln2, layer.w_gate_up, layer.w_down, w.eps, w.scaling
        )
    return torch.mm(rms_last(hidden, w.norm, w.eps), w.lm_head)
