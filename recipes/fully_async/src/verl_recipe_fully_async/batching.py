"""Samples into a training batch: generations finished at different times have different response
widths (each is as long as its own longest response), so they are right-padded to one width first."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from verl import DataProto

# padding of the response-aligned tensors; every other [N, R] tensor pads with 0
_FILL = {"responses": None, "token_segments": -1}  # None: the pad token id
_FULL_SEQUENCE = ("input_ids", "attention_mask")


def pad_responses(data: DataProto, width: int, pad_token_id: int) -> DataProto:
    """``data`` with its responses right-padded to ``width`` tokens (a new DataProto; ``prompts`` and
    non-tensors unchanged, positions keep counting)."""
    r = data.batch["responses"].shape[1]
    extra = width - r
    if extra < 0:
        raise ValueError(f"cannot pad responses of width {r} down to {width}")
    if extra == 0:
        return data
    tensors = {}
    for key, value in data.batch.items():
        if key == "prompts" or value.dim() < 2:
            tensors[key] = value
        elif key == "position_ids":
            steps = torch.arange(1, extra + 1, dtype=value.dtype, device=value.device)
            tensors[key] = torch.cat([value, value[:, -1:] + steps], dim=1)
        elif key in _FULL_SEQUENCE:
            tensors[key] = F.pad(value, (0, extra), value=pad_token_id if key == "input_ids" else 0)
        elif value.shape[1] == r:
            fill = _FILL.get(key, 0)
            tensors[key] = F.pad(value, (0, extra), value=pad_token_id if fill is None else fill)
        else:
            raise ValueError(
                f"tensor {key!r} of shape {tuple(value.shape)} is neither [N, P+R] nor [N, R={r}]"
            )
    return DataProto.from_dict(
        tensors=tensors, non_tensors=dict(data.non_tensor_batch), meta_info=dict(data.meta_info)
    )


def concat_samples(datas: list[DataProto], pad_token_id: int) -> DataProto:
    """One batch from several generations: responses padded to the widest, rows in the given order."""
    if not datas:
        raise ValueError("no samples to concatenate")
    width = max(d.batch["responses"].shape[1] for d in datas)
    return DataProto.concat([pad_responses(d, width, pad_token_id) for d in datas])


__all__ = ["concat_samples", "pad_responses"]
