"""``trainer.balance_batch``: reorder a batch so every data-parallel rank gets a similar token count.

DP_COMPUTE_PROTO hands rank r the r-th contiguous chunk of the batch; with unequal response lengths
one rank can get most of the tokens and the others wait for it. Reordering rows so each chunk's
token sum is close to the mean evens that out. Rows keep their ``uid``, so group-based estimators are
unaffected by the order.
"""

from __future__ import annotations

import heapq

import torch

from verl.protocol import DataProto


def balanced_partitions(lengths: list[int], k: int) -> list[list[int]]:
    """Split row indices into ``k`` parts of equal size (len(lengths) / k) with similar length sums.

    Greedy: longest rows first, each to the lightest part that still has room (the classic LPT
    heuristic with a size cap). Indices within a part are sorted, so the result is deterministic.
    """
    n = len(lengths)
    if k <= 0 or n % k:
        raise ValueError(f"cannot split {n} rows into {k} equal parts; the batch must be divisible by the worker count")
    cap = n // k
    heap = [(0, p) for p in range(k)]  # (token sum, part)
    parts: list[list[int]] = [[] for _ in range(k)]
    order = sorted(range(n), key=lambda i: (-lengths[i], i))
    for i in order:
        full = []
        total, p = heapq.heappop(heap)
        while len(parts[p]) >= cap:
            full.append((total, p))
            total, p = heapq.heappop(heap)
        parts[p].append(i)
        heapq.heappush(heap, (total + lengths[i], p))
        for item in full:
            heapq.heappush(heap, item)
    return [sorted(part) for part in parts]


def balance_batch(batch: DataProto, world_size: int, metrics: dict) -> DataProto:
    """Reorder ``batch`` in place (by ``attention_mask`` token counts) for ``world_size`` ranks."""
    lengths = batch.batch["attention_mask"].sum(-1).tolist()
    if world_size <= 1 or len(lengths) % world_size:
        return batch  # one rank, or a batch DP_COMPUTE_PROTO will pad anyway: nothing to balance
    parts = balanced_partitions(lengths, world_size)
    batch.reorder(torch.tensor([i for part in parts for i in part]))
    sums = [sum(lengths[i] for i in part) for part in parts]
    metrics.update({"global_seqlen/min": min(sums), "global_seqlen/max": max(sums),
                    "global_seqlen/minmax_diff": max(sums) - min(sums), "global_seqlen/mean": sum(sums) / len(sums)})
    return batch
