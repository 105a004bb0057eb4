"""Native rollout: a lean decode loop for Llama-family decoders on the trainer's own weights.

Same interface, sampling semantics and output contract as the ``hf`` engine (docs/contracts.md;
see :mod:`verl.workers.rollout.hf_rollout`): one response per row, ``rollout_log_probs`` =
``log_softmax(logits / temperature)`` at the chosen token, responses cut after their first EOS and
right-padded, R = the longest response. What differs is how the work is done:

- the model's forward is not called per token; the loop reads the module's weights (q/k/v and
  gate/up projections fused into one matrix each, once per generation) and runs the decoder math
  itself, so a decode step is a fixed, short sequence of batched tensor ops whatever the batch size
  (the one-token step, with the fewest ops per layer, is :func:`verl.workers.rollout.native_decode.decode_step`);
- keys and values go into one preallocated cache ``[layers, 2, rows, kv_heads, P + R, head_dim]``
  written in place (no per-step concatenation); rotary cos/sin for every position are computed once;
- sampling (temperature, top-k, top-p, greedy) happens in one function, :func:`sample_next`;
- rows that hit EOS stop costing work: they are dropped from the active batch (the cache and masks
  are compacted) once at least a quarter of the active rows are done, and masked until then.

Supported: ``model_type`` in :data:`SUPPORTED_MODEL_TYPES` without sliding-window attention, as a
plain HF module or FSDP2-sharded (parameters are gathered once for the whole generation, so the
loop runs no collectives and ranks decode independently). Anything else (FSDP1, other
architectures) falls back to the ``hf`` decode loop, with one warning.

Partial rollouts (pause a generation, change the weights, resume it) build on this loop:
:mod:`verl.workers.rollout.partial_rollout`.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from verl.workers.rollout.base import generation_tensors, register_rollout
from verl.workers.rollout.hf_rollout import (
    HFRollout,
    SamplingParams,
    concat_generations,
    gathered_fsdp2_params,
)
from verl.workers.rollout.native_decode import decode_step, decode_step_compiled

if TYPE_CHECKING:
    from verl import DataProto

#: HF ``config.model_type`` values whose decoder layers this loop reproduces (pre-norm RMSNorm,
#: rotary attention with optional q/k/v bias and, for qwen3, per-head q/k RMSNorm; SwiGLU MLP).
SUPPORTED_MODEL_TYPES = frozenset({"llama", "mistral", "qwen2", "qwen3"})

#: Compact the active batch once this fraction of its rows has finished.
COMPACT_FRACTION = 0.25


@dataclass
class _Layer:
    # projection weights are stored transposed, [in, out] and contiguous (see :func:`_linear`)
    w_qkv: torch.Tensor
    b_qkv: torch.Tensor | None
    w_o: torch.Tensor
    w_gate_up: torch.Tensor
    w_down: torch.Tensor
    ln1: torch.Tensor
    ln2: torch.Tensor
    q_norm: torch.Tensor | None
    k_norm: torch.Tensor | None


@dataclass
class DecoderWeights:
    """A snapshot of a decoder's weights in the layout the loop uses: q/k/v and gate/up fused into one
    matrix each, every projection (and the LM head) transposed to ``[in, out]``."""

    embed: torch.Tensor
    layers: list[_Layer]
    norm: torch.Tensor
    lm_head: torch.Tensor
    rotary: nn.Module
    n_heads: int
    n_kv_heads: int
    head_dim: int
    scaling: float
    eps: float


def unsupported_reason(module: nn.Module) -> str | None:
    """Why the native loop cannot run ``module`` (None when it can)."""
    from torch.distributed.fsdp import FullyShardedDataParallel

    if isinstance(module, FullyShardedDataParallel):
        return "FSDP1-wrapped modules are not supported (use actor.strategy=fsdp2)"
    model_type = getattr(module.config, "model_type", None)
    if model_type not in SUPPORTED_MODEL_TYPES:
        return f"model_type {model_type!r} is not one of {sorted(SUPPORTED_MODEL_TYPES)}"
    for layer in module.model.layers:
        if getattr(layer.self_attn, "sliding_window", None) is not None:
            return "sliding-window attention layers are not supported"
    return None


def _t(*weights: torch.Tensor) -> torch.Tensor:
    """``[out, in]`` weights stacked along ``out``, as one contiguous ``[in, sum(out)]`` matrix."""
    return torch.cat(weights).t().contiguous()


def decoder_weights(module: nn.Module) -> DecoderWeights:
    """Read ``module``'s (unsharded) weights into the loop's layout (one copy of the projections)."""
    base = module.model
    cfg = module.config
    layers = []
    for layer in base.layers:
        attn, mlp = layer.self_attn, layer.mlp
        biases = [attn.q_proj.bias, attn.k_proj.bias, attn.v_proj.bias]
        layers.append(
            _Layer(
                w_qkv=_t(attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight),
                b_qkv=None if biases[0] is None else torch.cat(biases),
                w_o=_t(attn.o_proj.weight),
                w_gate_up=_t(mlp.gate_proj.weight, mlp.up_proj.weight),
                w_down=_t(mlp.down_proj.weight),
                ln1=layer.input_layernorm.weight,
                ln2=layer.post_attention_layernorm.weight,
                q_norm=attn.q_norm.weight if isinstance(getattr(attn, "q_norm", None), nn.Module) else None,
                k_norm=attn.k_norm.weight if isinstance(getattr(attn, "k_norm", None), nn.Module) else None,
            )
        )
    first = base.layers[0].self_attn
    return DecoderWeights(
        embed=base.embed_tokens.weight,
        layers=layers,
        norm=base.norm.weight,
        lm_head=_t(module.lm_head.weight),
        rotary=base.rotary_emb,
        n_heads=int(cfg.num_attention_heads),
        n_kv_heads=int(cfg.num_key_value_heads),
        head_dim=int(first.head_dim),
        scaling=float(first.scaling),
        eps=float(base.norm.variance_epsilon),
    )


def _linear(x: torch.Tensor, w_t: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``x @ w_t (+ bias)`` over the last dim of ``x``, with ``w_t`` ``[in, out]`` contiguous.

    At decode's few rows (64 x hidden 256..896, one thread) ``mm`` with a contiguous right-hand side
    runs at 1.25-1.45x the rate of ``F.linear`` on the ``[out, in]`` weight, about the machine's
    large-matmul rate (``benchmarks/rollout_engines.py --linear``).
    """
    flat = x.reshape(-1, x.shape[-1])
    out = torch.mm(flat, w_t) if bias is None else torch.addmm(bias, flat, w_t)
    return out.view(*x.shape[:-1], w_t.shape[1])


def _rms(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    # HF's RMSNorm: normalise in float32, cast back, then scale
    return weight * F.rms_norm(x.float(), (x.shape[-1],), eps=eps).to(x.dtype)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin_signed: torch.Tensor) -> torch.Tensor:
    """HF's ``x * cos + rotate_half(x) * sin`` with ``rotate_half(x) * sin`` computed as
    ``roll(x, half) * sin_signed`` (``sin_signed`` = sin with its first half negated): the same
    products and one rounding each, one op fewer."""
    return x * cos + x.roll(x.shape[-1] // 2, dims=-1) * sin_signed


def decoder_forward(
    w: DecoderWeights,
    ids: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    cache: torch.Tensor,
    start: int,
    attn_mask: torch.Tensor,
    compiled: bool = False,
) -> torch.Tensor:
    """Run ``ids`` [B, T] (cache positions ``start .. start+T``) and return the last position's logits.

    ``cos``/``sin``: [B, 1, T, head_dim]; ``cache``: [L, 2, B, kv_heads, S, head_dim], written in place;
    ``attn_mask``: bool [B, 1, T, start+T], True where a query may attend to a key; for one query
    (T == 1) an additive float mask [B, 1, 1, start+T] (0 or -inf) instead. ``compiled``: one-token steps
    run :func:`~verl.workers.rollout.native_decode.decode_step_compiled`.
    """
    b, t = ids.shape
    end = start + t
    nh, nkv, d = w.n_heads, w.n_kv_heads, w.head_dim
    half = d // 2
    sin = torch.cat((-sin[..., :half], sin[..., half:]), dim=-1)  # once per call, for _rotate
    if t == 1 and attn_mask.is_floating_point():  # one token per row: the decode step's leaner path
        step = decode_step_compiled if compiled else decode_step
        return step(w, ids[:, 0], cos[:, 0, 0], sin[:, 0, 0], cache, start, attn_mask[:, 0, 0])
    hidden = F.embedding(ids, w.embed)
    for i, layer in enumerate(w.layers):
        h = _rms(hidden, layer.ln1, w.eps)
        qkv = _linear(h, layer.w_qkv, layer.b_qkv).view(b, t, nh + 2 * nkv, d)
        if layer.q_norm is None:
            # q and k rotated together: one set of elementwise ops instead of two
            qk = _rotate(qkv[:, :, : nh + nkv].transpose(1, 2), cos, sin)
            q, k = qk[:, :nh], qk[:, nh:]
        else:
            q = _rotate(_rms(qkv[:, :, :nh], layer.q_norm, w.eps).transpose(1, 2), cos, sin)
            k = _rotate(_rms(qkv[:, :, nh : nh + nkv], layer.k_norm, w.eps).transpose(1, 2), cos, sin)
        cache[i, 0, :, :, start:end] = k
        cache[i, 1, :, :, start:end] = qkv[:, :, nh + nkv :].transpose(1, 2)
        keys, values = cache[i, 0, :, :, :end], cache[i, 1, :, :, :end]
        if t == 1:
            # one query per row: plain matmuls over [B, kv_heads, group, S] beat SDPA's CPU kernel at
            # these sizes; the query heads sharing a kv head are stacked (HF's repeat_kv order)
            scores = torch.matmul(q.reshape(b, nkv, -1, d), keys.transpose(-1, -2)) * w.scaling
            probs = torch.softmax(scores + attn_mask, dim=-1)
            out = torch.matmul(probs, values).view(b, nh, 1, d)
        else:
            out = F.scaled_dot_product_attention(
                q, keys, values, attn_mask=attn_mask, scale=w.scaling, enable_gqa=nh != nkv
            )
        hidden = hidden + _linear(out.transpose(1, 2).reshape(b, t, nh * d), layer.w_o)
        h = _rms(hidden, layer.ln2, w.eps)
        gate, up = _linear(h, layer.w_gate_up).chunk(2, dim=-1)
        hidden = hidden + _linear(F.silu(gate, inplace=True).mul_(up), layer.w_down)
    return _linear(_rms(hidden[:, -1], w.norm, w.eps), w.lm_head)


def sample_next(
    logits: torch.Tensor,
    params: SamplingParams,
    generator: torch.Generator | None = None,
    want_log_probs: bool = False,
    inplace: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Pick the next token of every row from ``logits`` [B, V]; the one place sampling happens.

    Temperature first, then top-k, then top-p over what remains (renormalised), then a draw (or the
    argmax when ``params.do_sample`` is false). Returns the tokens [B] and, when ``want_log_probs``,
    ``log_softmax(logits / temperature)`` at them (unfiltered, as the actor recomputes it).
    ``inplace=True`` lets it overwrite ``logits`` (fp32) instead of copying them (the decode loop's
    logits are its own); without top-k/top-p the draw then allocates one [B, V] buffer in all.
    """
    logits = logits.float()
    if params.temperature != 1.0:
        logits = logits.div_(params.temperature) if inplace else logits / params.temperature
    elif not inplace:
        logits = logits.clone()
    vocab = logits.shape[-1]
    if not params.do_sample:
        tokens = logits.argmax(dim=-1)
        if not want_log_probs:
            return tokens, None
        lse = torch.logsumexp(logits, dim=-1)
        return tokens, logits.gather(-1, tokens.unsqueeze(-1)).squeeze(-1) - lse
    if params.top_k <= 0 or params.top_k >= vocab:
        if params.top_p >= 1.0:
            # the whole vocabulary: shift by the max in place, exponentiate into the one buffer and
            # turn it into the CDF in place; its last column is the normaliser of log_softmax
            logits.sub_(logits.amax(dim=-1, keepdim=True))
            cdf = torch.exp(logits).cumsum_(dim=-1)
            total = cdf[:, -1:]
            u = torch.rand((cdf.shape[0], 1), generator=generator, device=cdf.device) * total
            tokens = torch.searchsorted(cdf, u, right=True).clamp_(max=vocab - 1)
            lp = (logits.gather(-1, tokens) - total.log()).squeeze(-1) if want_log_probs else None
            return tokens.squeeze(-1), lp
    # work on the sorted candidates only: the top-k (already sorted by topk) or the full sort
    if 0 < params.top_k < vocab:
        cand, order = torch.topk(logits, params.top_k, dim=-1)
    else:
        cand, order = torch.sort(logits, dim=-1, descending=True)
    probs = torch.softmax(cand, dim=-1)
    if params.top_p < 1.0:
        # drop a candidate when those ranked above it already reach top_p (the best always stays)
        probs = probs.masked_fill((probs.cumsum(dim=-1) - probs) >= params.top_p, 0.0)
    # inverse-CDF draw: one uniform per row (multinomial draws one exponential per vocab entry)
    cdf = probs.cumsum(dim=-1)
    u = torch.rand((cdf.shape[0], 1), generator=generator, device=cdf.device) * cdf[:, -1:]
    choice = torch.searchsorted(cdf, u, right=True).clamp_(max=cdf.shape[-1] - 1)
    tokens = order.gather(-1, choice).squeeze(-1)
    if not want_log_probs:
        return tokens, None
    lse = torch.logsumexp(logits, dim=-1)
    return tokens, logits.gather(-1, tokens.unsqueeze(-1)).squeeze(-1) - lse


@torch.no_grad()
def native_generate(
    module: nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    position_ids: torch.Tensor,
    params: SamplingParams,
    eos_token_ids: Sequence[int],
    pad_token_id: int,
    calculate_log_probs: bool = False,
    generator: torch.Generator | None = None,
    weights: DecoderWeights | None = None,
    compiled: bool = False,
) -> dict[str, torch.Tensor]:
    """Sample responses for left-padded prompts [B, P]; same outputs as ``hf_rollout.generate_tokens``.

    ``module`` must have unsharded weights (see :func:`unsupported_reason`); ``weights`` may be given
    to reuse one :func:`decoder_weights` snapshot across calls. ``compiled``: decode steps through
    ``torch.compile`` (:func:`~verl.workers.rollout.native_decode.decode_step_compiled`).
    """
    if input_ids.shape != attention_mask.shape or input_ids.shape != position_ids.shape:
        raise ValueError(
            f"prompt tensors disagree in shape: input_ids {tuple(input_ids.shape)}, attention_mask "
            f"{tuple(attention_mask.shape)}, position_ids {tuple(position_ids.shape)}"
        )
    w = weights if weights is not None else decoder_weights(module)
    device, dtype = input_ids.device, w.embed.dtype
    batch, p = input_ids.shape
    r_max = params.response_length
    total = p + r_max
    eos = torch.tensor(list(eos_token_ids), dtype=torch.long, device=device)

    responses = torch.full((batch, r_max), pad_token_id, dtype=torch.long, device=device)
    resp_mask = torch.zeros((batch, r_max), dtype=attention_mask.dtype, device=device)
    log_probs = (
        torch.zeros((batch, r_max), dtype=torch.float32, device=device) if calculate_log_probs else None
    )

    last_pos = position_ids[:, -1:]
    all_pos = torch.cat([position_ids, last_pos + torch.arange(1, r_max + 1, device=device)], dim=1)
    cos, sin = w.rotary(w.embed[:1], all_pos)  # [B, P+R, d] each, in the weights' dtype
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    # keys a query may see: real prompt tokens and every generated position
    key_ok = torch.cat(
        [attention_mask.bool(), torch.ones((batch, r_max), dtype=torch.bool, device=device)], 1
    )
    key_bias = torch.zeros(key_ok.shape, dtype=dtype, device=device).masked_fill_(~key_ok, float("-inf"))
    cache = torch.empty(
        (len(w.layers), 2, batch, w.n_kv_heads, total, w.head_dim), dtype=dtype, device=device
    )

    causal = torch.ones((p, p), dtype=torch.bool, device=device).tril()
    # a query on a pad position would see no key at all (NaN in softmax): let it see itself
    prefill_mask = (causal & key_ok[:, None, :p]) | torch.eye(p, dtype=torch.bool, device=device)
    logits = decoder_forward(w, input_ids, cos[:, :, :p], sin[:, :, :p], cache, 0, prefill_mask.unsqueeze(1))

    rows = torch.arange(batch, device=device)  # original row of each active row
    running = torch.ones(batch, dtype=torch.bool, device=device)
    length = 0
    for step in range(r_max):
        tok, lp = sample_next(logits, params, generator, want_log_probs=calculate_log_probs, inplace=True)
        live = rows[running]
        responses[live, step] = tok[running]
        resp_mask[live, step] = 1
        if log_probs is not None:
            log_probs[live, step] = lp[running]
        length = step + 1
        running = running & ~torch.isin(tok, eos)
        n_running = int(running.sum())
        if n_running == 0 or step + 1 == r_max:
            break
        if len(rows) - n_running >= max(1, COMPACT_FRACTION * len(rows)):
            keep = running.nonzero().squeeze(-1)
            rows, tok, running = rows[keep], tok[keep], running[keep]
            cache, cos, sin, key_bias = cache[:, :, keep], cos[keep], sin[keep], key_bias[keep]
        pos = p + step
        logits = decoder_forward(
            w,
            tok.unsqueeze(-1),
            cos[:, :, pos : pos + 1],
            sin[:, :, pos : pos + 1],
            cache,
            pos,
            key_bias[:, None, None, : pos + 1],
            compiled,
        )

    responses, resp_mask = responses[:, :length], resp_mask[:, :length]
    return generation_tensors(
        input_ids, attention_mask, responses, resp_mask, all_pos[:, : p + length].to(position_ids.dtype),
        None if log_probs is None else log_probs[:, :length],
    )  # fmt: skip


def pad_responses_to(gen: dict[str, torch.Tensor], length: int, pad_token_id: int) -> dict[str, torch.Tensor]:
    """Right-pad a generation's response columns to ``length`` (for equal R across ranks)."""
    extra = length - gen["responses"].shape[1]
    if extra <= 0:
        return gen
    out = dict(gen)
    for key, fill in (
        ("responses", pad_token_id),
        ("response_mask", 0),
        ("rollout_log_probs", 0.0),
        ("input_ids", pad_token_id),
        ("attention_mask", 0),
    ):
        if key in out:
            out[key] = F.pad(out[key], (0, extra), value=fill)
    pos = out["position_ids"]
    steps = torch.arange(1, extra + 1, dtype=pos.dtype, device=pos.device)
    out["position_ids"] = torch.cat([pos, pos[:, -1:] + steps], dim=1)
    return out


@register_rollout("native")
class NativeRollout(HFRollout):
    """The ``hf`` engine's interface and config (``actor_rollout_ref.rollout``), decoded by
    :func:`native_generate`. Falls back to the ``hf`` loop for modules it cannot run (one warning).
    ``compile``: decode steps through ``torch.compile`` (the worker passes the actor engine's
    ``compiled``, i.e. ``actor.use_torch_compile`` as resolved)."""

    def __init__(self, module: nn.Module, config, tokenizer=None, *, compile: bool = False, **kwargs):
        super().__init__(module, config, tokenizer, **kwargs)
        self.compile = bool(compile)

    def generate_sequences(self, prompts: DataProto) -> DataProto:
        reason = unsupported_reason(self.module)
        if reason is not None:
            warnings.warn(f"native rollout falls back to the hf decode loop: {reason}", stacklevel=2)
            return super().generate_sequences(prompts)
        params, eos, micro_batches = self.decode_inputs(prompts)
        with gathered_fsdp2_params(self.module, self.reshard_after_forward), torch.no_grad():
            weights = decoder_weights(self.module)  # no autograd graph over the fused copies
            chunks = [
                native_generate(
                    self.module,
                    input_ids,
                    attention_mask,
                    position_ids,
                    params,
                    eos,
                    self.pad_token_id,
                    calculate_log_probs=bool(self.config.calculate_log_probs),
                    generator=self.generator,
                    weights=weights,
                    compiled=self.compile,
                )
                for input_ids, attention_mask, position_ids in micro_batches
            ]
            del weights  # the fused copies and unsharded views must not outlive the gather
        tensors = concat_generations(chunks, self.pad_token_id)
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            from verl.utils.device import collective_device

            # ranks decode independently; the batch keeps one R across data-parallel ranks
            r = torch.tensor([tensors["responses"].shape[1]], dtype=torch.int64, device=collective_device())
            dist.all_reduce(r, op=dist.ReduceOp.MAX)
            tensors = pad_responses_to(tensors, int(r.item()), self.pad_token_id)
        from verl import DataProto

        return DataProto.from_dict(tensors={k: v.cpu() for k, v in tensors.items()})


__all__ = [
    "SUPPORTED_MODEL_TYPES",
    "DecoderWeights",
    "NativeRollout",
    "decoder_forward",
    "decoder_weights",
    "native_generate",
    "sample_next",
    "unsupported_reason",
]
