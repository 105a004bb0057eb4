"""Micro-batch sizes: fixed row counts, or a token budget (``use_dynamic_bsz``).

The FSDP engines run padded batches, so a micro-batch of ``b`` rows of padded width ``L`` costs
``b * L`` tokens whatever the real lengths. With a token budget, a micro-batch therefore holds
``max(1, max_token_len // L)`` rows. Every data-parallel rank sees the same width and row count (the
dispatcher splits one padded batch evenly), so every rank runs the same number of micro-batches, as
FSDP's collectives require.
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
