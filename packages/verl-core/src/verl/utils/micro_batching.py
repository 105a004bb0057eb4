"""Micro-batch sizes: fixed row counts, or a token budget (``use_dynamic_bsz``).

The FSDP engines run padded batches, so a micro-batch of ``b`` rows of padded width ``L`` costs
``b * L`` tokens whatever the real lengths. With a token budget, a micro-batch therefore holds
``max(1, max_token_len // L)`` rows. Every data-parallel rank sees the same width and row count (the
dispatcher splits one padded batch evenly), so every rank runs the same number of micro-batches, as
FSDP's collectives require.

With packed sequences (``model.use_remove_padding``) a micro-batch costs its real tokens, so
:func:`token_budget_groups` fills the budget with real tokens instead.
"""

from __future__ import annotations


def rows_per_micro_batch(
    seq_len: int, *, micro_batch_size: int | None, use_dynamic_bsz: bool = False, max_token_len: int | None = None
) -> int:
    """Rows per micro-batch for sequences padded to ``seq_len`` tokens (see module doc)."""
    if use_dynamic_bsz:
        if max_token_len is None or int(max_token_len) <= 0:
            raise ValueError(f"use_dynamic_bsz=True needs a positive max token length, got {max_token_len!r}")
        return max(1, int(max_token_len) // int(seq_len))
    if micro_batch_size is None or int(micro_batch_size) <= 0:
        raise ValueError(f"micro-batch size must be a positive number of rows, got {micro_batch_size!r}")
    return int(micro_batch_size)


def token_budget_groups(lengths: list[int], max_token_len: int, *, sync_ranks: bool = True) -> list[list[int]]:
    """Split rows into micro-batches of about ``max_token_len`` *real* tokens (packed sequences).

    The count is ``ceil(sum(lengths) / max_token_len)`` (at least 1, at most one row per micro-batch),
    raised to the largest count over the data-parallel ranks when ``sync_ranks`` and
    torch.distributed is up, because every rank must run the same number of FSDP forwards. Rows are
    dealt longest first to the lightest micro-batch, so token counts are even; each group lists row
    indices in increasing order. A row longer than the budget gets a micro-batch of its own.
    """
    import heapq
    import math

    import torch
    import torch.distributed as dist

    if int(max_token_len) <= 0:
        raise ValueError(f"use_dynamic_bsz=True needs a positive max token length, got {max_token_len!r}")
    if not lengths:
        raise ValueError("no rows to split into micro-batches")
    count = max(1, math.ceil(sum(lengths) / int(max_token_len)))
    if sync_ranks and dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        t = torch.tensor([count], dtype=torch.int64, device="cuda" if dist.get_backend() == "nccl" else "cpu")
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        count = int(t.item())
    count = min(count, len(lengths))
    heap = [(0, g) for g in range(count)]
    groups: list[list[int]] = [[] for _ in range(count)]
    for i in sorted(range(len(lengths)), key=lambda j: (-lengths[j], j)):
        load, g = heapq.heappop(heap)
        groups[g].append(i)
        heapq.heappush(heap, (load + lengths[i], g))
    return [sorted(g) for g in groups]
