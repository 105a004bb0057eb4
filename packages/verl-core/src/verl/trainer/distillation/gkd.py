"""GKD's on-policy fraction ``lmbda`` (https://arxiv.org/abs/2306.13649): after generation, each row keeps
the student's sample with probability ``lmbda`` and otherwise gets the dataset's target as its response
(``reward_model.ground_truth`` tokenized, then EOS), so the teacher and the distillation loss see a mix of
on-policy and fixed-data sequences. ``lmbda=1`` (the default) is pure on-policy distillation.

The target must be a whole response, as in an SFT row (the built-in addition task's answer is); rows are
drawn from a generator seeded with (``trainer.seed``, the training step), so a run, and a resumed
run, draws the same rows.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from verl.protocol import DataProto

# the tensors generation leaves in a batch that a replaced response changes (all rebuilt here)
_PROMPT_SIDE = ("prompts",)
_REBUILT = ("responses", "response_mask", "input_ids", "attention_mask", "position_ids")


def _target_ids(row: Any, tokenizer: Any, width: int) -> list[int]:
    if not isinstance(row, dict) or "ground_truth" not in row:
        raise KeyError(f"distillation_loss.lmbda < 1 needs reward_model.ground_truth in every row; got {row!r}")
    ids = tokenizer.encode(str(row["ground_truth"]), add_special_tokens=False) + [int(tokenizer.eos_token_id)]
    return ids[:width]


def mix_in_targets(batch: DataProto, tokenizer: Any, config: Any, metrics: dict) -> DataProto:
    """Replace the responses of the rows drawn off-policy (probability 1 - ``lmbda``) by their targets.

    Returns the batch, its generation tensors rebuilt at a response width that fits the targets (at most
    ``rollout.response_length``), and adds ``distillation/on_policy_fraction`` to ``metrics``."""
    lmbda = float(config.distillation.distillation_loss.lmbda)
    response_length = int(config.actor_rollout_ref.rollout.response_length)
    if lmbda >= 1.0:
        return batch
    n = len(batch)
    rng = np.random.default_rng([int(config.trainer.seed), int(batch.meta_info.get("global_steps", 0))])
    off = np.flatnonzero(rng.random(n) >= lmbda)
    metrics["distillation/on_policy_fraction"] = 1.0 - len(off) / max(n, 1)
    if len(off) == 0:
        return batch
    b = batch.batch
    extra = [k for k in b.keys() if k not in _REBUILT + _PROMPT_SIDE and b[k].dim() >= 2
             and b[k].shape[1] == b["responses"].shape[1]]
    if extra:
        raise ValueError(
            f"distillation_loss.lmbda < 1 rebuilds {', '.join(_REBUILT)} for the rows it replaces, but the batch "
            f"also holds the per-response-token {extra}, which would no longer match; drop them (e.g. "
            "rollout.calculate_log_probs=false)"
        )
    targets = {int(i): _target_ids(batch.non_tensor_batch["reward_model"][i], tokenizer, response_length)
               for i in off}
    prompts, prompt_mask = b["prompts"], b["attention_mask"][:, : b["prompts"].shape[1]]
    width = max(b["responses"].shape[1], max(len(t) for t in targets.values()))
    pad = int(tokenizer.pad_token_id)
    responses = torch.full((n, width), pad, dtype=b["responses"].dtype)
    responses[:, : b["responses"].shape[1]] = b["responses"]
    mask = torch.zeros((n, width), dtype=b["response_mask"].dtype)
    mask[:, : b["response_mask"].shape[1]] = b["response_mask"]
    resp_attn = torch.zeros((n, width), dtype=b["attention_mask"].dtype)
    resp_attn[:, : b["responses"].shape[1]] = b["attention_mask"][:, prompts.shape[1]:]
    for i, ids in targets.items():
        responses[i] = pad
        responses[i, : len(ids)] = torch.tensor(ids, dtype=responses.dtype)
        mask[i], resp_attn[i] = 0, 0
        mask[i, : len(ids)], resp_attn[i, : len(ids)] = 1, 1
    last = b["position_ids"][:, prompts.shape[1] - 1 : prompts.shape[1]]
    steps = torch.arange(1, width + 1, dtype=last.dtype)
    b = batch.batch
    rebuilt = {
        "responses": responses,
        "response_mask": mask,
        "input_ids": torch.cat([prompts, responses.to(prompts.dtype)], dim=1),
        "attention_mask": torch.cat([prompt_mask, resp_attn], dim=1),
        "position_ids": torch.cat([b["position_ids"][:, : prompts.shape[1]], last + steps], dim=1),
    }
    return DataProto.from_dict(tensors={**{k: b[k] for k in b.keys() if k not in _REBUILT}, **rebuilt},
                               non_tensors=dict(batch.non_tensor_batch), meta_info=dict(batch.meta_info))
