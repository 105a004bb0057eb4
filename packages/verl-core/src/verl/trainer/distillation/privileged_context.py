"""The teacher's input for on-policy self-distillation: the student's prompt and response, with text only
the teacher sees (e.g. the ground truth) inserted around the prompt.

The teacher scores the student's own response tokens, so only the prompt side changes: per row, the real
prompt tokens (without the left padding) and the tokenized context are joined (``after_prompt``: prompt,
context, response, upstream's layout; ``before_prompt``: context, prompt, response), left-padded again,
and followed by the unchanged response columns. The teacher's outputs are then aligned with the
student's response positions as they are.
"""

from __future__ import annotations

from typing import Any

import torch

POSITIONS = ("after_prompt", "before_prompt")


def resolve_field(row: Any, key: str) -> str:
    """The text at dotted ``key`` of one row's non-tensor fields (``reward_model.ground_truth`` reads
    ``row["reward_model"]["ground_truth"]``); numpy scalars and one-element arrays become their value."""
    value = row
    for part in key.split("."):
        if not isinstance(value, dict) or part not in value:
            have = sorted(value) if isinstance(value, dict) else type(value).__name__
            raise KeyError(f"privileged_context.key={key!r}: no {part!r} in the row (it has {have})")
        value = value[part]
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, list | tuple):
        value = "\n".join(str(v) for v in value)
    return str(value)


def context_texts(non_tensor_batch: dict[str, Any], key: str, template: str) -> list[str]:
    """``template`` with ``{solution}`` replaced (literally, no ``str.format``) by each row's field ``key``."""
    top = key.split(".", 1)[0]
    if top not in non_tensor_batch:
        raise KeyError(
            f"privileged_context.key={key!r}: the batch has no column {top!r} (columns: {sorted(non_tensor_batch)})"
        )
    rows = non_tensor_batch[top]
    rest = key.split(".", 1)[1] if "." in key else None
    texts = []
    for row in rows:
        value = resolve_field(row, rest) if rest is not None else resolve_field({"v": row}, "v")
        texts.append(template.replace("{solution}", value))
    return texts


def privileged_inputs(
    prompts: torch.Tensor,
    prompt_mask: torch.Tensor,
    responses: torch.Tensor,
    response_attention: torch.Tensor,
    contexts: list[list[int]],
    position: str,
    pad_token_id: int,
) -> dict[str, torch.Tensor]:
    """The teacher's ``input_ids``, ``attention_mask``, ``position_ids`` and ``responses`` with each row's
    ``contexts[i]`` token ids placed ``position`` (see the module doc).

    ``prompts`` / ``prompt_mask`` [B, P] are left-padded; ``responses`` / ``response_attention`` [B, R]
    right-padded. The new prompt width is the longest joined prompt."""
    if position not in POSITIONS:
        raise ValueError(f"privileged_context.position={position!r} is not one of: {', '.join(POSITIONS)}")
    if len(contexts) != prompts.shape[0]:
        raise ValueError(f"{len(contexts)} contexts for {prompts.shape[0]} rows")
    joined = []
    for row, mask, ctx in zip(prompts.tolist(), prompt_mask.bool().tolist(), contexts):
        real = [tok for tok, keep in zip(row, mask) if keep]
        joined.append(real + list(ctx) if position == "after_prompt" else list(ctx) + real)
    width = max(len(j) for j in joined)
    ids = torch.full((len(joined), width), int(pad_token_id), dtype=prompts.dtype)
    mask = torch.zeros((len(joined), width), dtype=prompt_mask.dtype)
    for i, j in enumerate(joined):
        if j:
            ids[i, width - len(j):] = torch.tensor(j, dtype=prompts.dtype)
            mask[i, width - len(j):] = 1
    attention = torch.cat([mask, response_attention.to(mask.dtype)], dim=1)
    return {
        "input_ids": torch.cat([ids, responses.to(ids.dtype)], dim=1),
        "attention_mask": attention,
        "position_ids": torch.clamp(torch.cumsum(attention, dim=1) - 1, min=0),
        "responses": responses,
    }
