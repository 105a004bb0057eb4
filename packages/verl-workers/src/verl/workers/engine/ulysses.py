"""Ulysses sequence parallelism (``ulysses_sequence_parallel_size``, DeepSpeed-Ulysses).

The ranks of one SP group hold the same micro-batch. Each runs the model on its own slice of the
packed sequence (``W / sp`` columns of every packed row, see :mod:`verl.workers.engine.packing`): the
embeddings, MLPs, norms and LM head are per token, so a slice is all they need. Attention needs every
position, so around it an all-to-all trades the sequence split for a head split::

    q, k, v  [B, heads, S/sp, D]  --all-to-all-->  [B, heads/sp, S, D]   (attention over all S)
    output   [B, S, heads/sp, D]  --all-to-all-->  [B, S/sp, heads, D]

Rotary embeddings see each token's real position (the sliced ``position_ids``) and the attention mask
is the full block-causal one, so every head computes exactly what it computes without SP. The
per-token outputs (log-probs, entropies, values) are all-gathered along the sequence at the end; the
gather's backward keeps this rank's slice of the gradient, which is right because every rank of the
group computes the same loss from the same gathered values.

The attention function is registered with transformers' ``AttentionInterface`` as ``verl_ulysses``
(sdpa inside). It is a plain sdpa call whenever no SP group is active (:func:`active_group`), so a
rollout that samples from the same module is not affected.

Process groups: a (dp, sp) mesh over the default group, rank = dp_rank * sp + sp_rank (gloo on CPU,
NCCL on GPU). FSDP shards over all ranks; data-parallel reductions of batch counts and metrics run
over the dp group (ranks with the same sp rank).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
import torch.distributed as dist

ATTN_IMPLEMENTATION = "verl_ulysses"
_ACTIVE: list[dist.ProcessGroup] = []


@contextlib.contextmanager
def active_group(group: dist.ProcessGroup | None) -> Iterator[None]:
    """Run attention as Ulysses over ``group`` inside the block (None: nothing changes). Wrap the
    backward too when gradient checkpointing recomputes the forward there."""
    if group is None:
        yield
        return
    _ACTIVE.append(group)
    try:
        yield
    finally:
        _ACTIVE.pop()


def _all_to_all(x: torch.Tensor, group, scatter_dim: int, gather_dim: int) -> torch.Tensor:
    size = dist.get_world_size(group)
    if x.shape[scatter_dim] % size:
        raise ValueError(
            f"cannot split dim {scatter_dim} of size {x.shape[scatter_dim]} over {size} sequence-parallel ranks"
        )
    send = torch.stack(x.chunk(size, dim=scatter_dim)).contiguous()  # [size, ...]: part i goes to rank i
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send, group=group)  # recv[i]: what rank i sent to this rank
    return torch.cat(recv.unbind(0), dim=gather_dim)


class _AllToAll(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group, scatter_dim: int, gather_dim: int):
        ctx.group, ctx.dims = group, (scatter_dim, gather_dim)
        return _all_to_all(x, group, scatter_dim, gather_dim)

    @staticmethod
    def backward(ctx, grad):
        scatter_dim, gather_dim = ctx.dims
        return _all_to_all(grad, ctx.group, gather_dim, scatter_dim), None, None, None


def all_to_all(x: torch.Tensor, group, scatter_dim: int, gather_dim: int) -> torch.Tensor:
    """Split ``x`` along ``scatter_dim`` over the ranks of ``group`` and concatenate what every rank
    sent along ``gather_dim`` (differentiable: the backward is the reverse all-to-all)."""
    return _AllToAll.apply(x, group, scatter_dim, gather_dim)


class _GatherSeq(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group, dim: int):
        ctx.group, ctx.dim = group, dim
        parts = [torch.empty_like(x) for _ in range(dist.get_world_size(group))]
        dist.all_gather(parts, x.contiguous(), group=group)
        return torch.cat(parts, dim=dim)

    @staticmethod
    def backward(ctx, grad):
        # every rank of the group computes the same loss from the gathered tensor: keep our slice
        size, rank = dist.get_world_size(ctx.group), dist.get_rank(ctx.group)
        return grad.chunk(size, dim=ctx.dim)[rank].contiguous(), None, None


def gather_sequence(x: torch.Tensor, group, dim: int = 1) -> torch.Tensor:
    """All-gather the sequence slices of ``x`` (rank order) along ``dim``; see :class:`_GatherSeq`."""
    return _GatherSeq.apply(x, group, dim)


def local_slice(x: torch.Tensor, group, dim: int = 1) -> torch.Tensor:
    """This rank's contiguous slice of ``x`` along ``dim`` (its size must divide by the group size)."""
    size, rank = dist.get_world_size(group), dist.get_rank(group)
    if x.shape[dim] % size:
        raise ValueError(
            f"sequence of {x.shape[dim]} tokens does not divide over {size} sequence-parallel ranks"
        )
    return x.chunk(size, dim=dim)[rank]


def ulysses_attention(module, query, key, value, attention_mask, **kwargs):
    """transformers attention function: sdpa, with the Ulysses all-to-alls when a group is active."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if not _ACTIVE:
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
    group = _ACTIVE[-1]
    # [B, heads, S/sp, D] -> [B, heads/sp, S, D]
    query, key, value = (all_to_all(t, group, scatter_dim=1, gather_dim=2) for t in (query, key, value))
    out, _ = sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
    # sdpa returns [B, S, heads/sp, D] -> [B, S/sp, heads, D]
    return all_to_all(out, group, scatter_dim=1, gather_dim=2), None


def install(model: torch.nn.Module, sp_size: int) -> None:
    """Check the model's heads split over ``sp_size`` ranks and route its attention through
    :func:`ulysses_attention` (registered once per process)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface, sdpa_mask

    cfg = model.config
    heads = int(cfg.num_attention_heads)
    kv_heads = int(getattr(cfg, "num_key_value_heads", None) or heads)
    if heads % sp_size or kv_heads % sp_size:
        raise ValueError(
            f"ulysses_sequence_parallel_size={sp_size} must divide the model's attention heads "
            f"(num_attention_heads={heads}, num_key_value_heads={kv_heads}); pick a divisor of both"
        )
    impl = cfg._attn_implementation
    if impl not in ("sdpa", ATTN_IMPLEMENTATION):
        raise NotImplementedError(
            f"ulysses_sequence_parallel_size={sp_size} wraps sdpa attention; the model uses "
            f"attn_implementation={impl!r}. Load it with sdpa (override_config) or set the size to 1"
        )
    if ATTN_IMPLEMENTATION not in AttentionInterface._global_mapping:
        AttentionInterface.register(ATTN_IMPLEMENTATION, ulysses_attention)
    if ATTN_IMPLEMENTATION not in ALL_MASK_ATTENTION_FUNCTIONS._global_mapping:
        # generation through the same module builds its 2D->4D masks as for sdpa
        AttentionMaskInterface.register(ATTN_IMPLEMENTATION, sdpa_mask)
    model.set_attn_implementation(ATTN_IMPLEMENTATION)


def sp_mesh(sp_size: int, device_type: str):
    """The (dp, sp) device mesh over the default group; raises when the world does not divide."""
    from torch.distributed.device_mesh import init_device_mesh

    world = dist.get_world_size()
    if sp_size < 1 or world % sp_size:
        raise ValueError(
            f"ulysses_sequence_parallel_size={sp_size} must divide the number of workers ({world})"
        )
    return init_device_mesh(device_type, (world // sp_size, sp_size), mesh_dim_names=("dp", "sp"))
