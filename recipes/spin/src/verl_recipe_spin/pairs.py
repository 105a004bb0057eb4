"""SPIN's (chosen, rejected) pairs, laid out as adjacent rows ``2i`` (chosen) and ``2i + 1`` (rejected).

Two ways to pick them (``algorithm.spin_mode``):

- ``reward`` (upstream verl): from the ``rollout.n`` scored answers to a prompt, the best (first
  highest score) is chosen and the worst (last lowest score) rejected; when all answers score the
  same the pair is the first and the last answer, and ``algorithm.spin_ties`` decides (the ``spin``
  estimator: ``first_chosen`` prefers the first, as upstream's ``argmax`` over its two answers does;
  ``drop`` labels the pair 0). With upstream's ``rollout.n=2`` the pair is the two answers in order.
- ``sft`` (the paper): the dataset's target answer is chosen, the model's own answer (``rollout.n=1``)
  rejected. The target is the assistant turn as the chat template renders it (exactly the tokens an SFT
  trainer puts its loss on), read from the row field ``algorithm.spin_target_key``.

Pair rows keep the rollout's tensor conventions (docs/contracts.md): left-padded prompts, right-padded
responses, positions counting on through the response.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from verl.protocol import DataProto
from verl.workers.rollout.base import generation_tensors

_RESPONSE_FILL = {"responses": None, "response_mask": 0, "token_level_scores": 0.0}


def reward_pairs(batch: DataProto) -> tuple[DataProto, dict[str, float]]:
    """The best and worst scored answer of each ``uid`` group as (chosen, rejected) rows, and metrics:
    ``spin/gen_score/mean`` (every answer's score: the policy's training accuracy) and
    ``spin/preference_pairs`` (share of prompts whose answers did not all score the same)."""
    uids = batch.non_tensor_batch["uid"]
    scores = (batch.batch["token_level_scores"] * batch.batch["response_mask"]).sum(dim=-1)
    groups: dict[Any, list[int]] = {}
    for row, uid in enumerate(uids):
        groups.setdefault(uid, []).append(row)
    order: list[int] = []
    preferred = 0
    for rows in groups.values():
        if len(rows) < 2:
            raise ValueError(
                f"uid {uids[rows[0]]!r} has one answer: spin_mode=reward picks its pair from rollout.n >= 2 answers"
            )
        s = scores[rows]
        best = rows[int(torch.argmax(s))]  # first highest
        worst = rows[len(rows) - 1 - int(torch.argmin(s.flip(0)))]  # last lowest: another row on a tie
        order += [best, worst]
        preferred += int(s.max() > s.min())
    metrics = {
        "spin/gen_score/mean": float(scores.mean().item()),
        "spin/preference_pairs": preferred / len(groups),
    }
    return batch.select_idxs(torch.tensor(order, dtype=torch.long)), metrics


def field_value(batch: DataProto, key: str, row: int) -> Any:
    """Row ``row``'s value of a dotted non-tensor field, e.g. ``reward_model.ground_truth``."""
    column, *path = key.split(".")
    if column not in batch.non_tensor_batch:
        raise KeyError(
            f"algorithm.spin_target_key={key!r}: the batch has no field {column!r} "
            f"(fields: {sorted(batch.non_tensor_batch)})"
        )
    value = batch.non_tensor_batch[column][row]
    for part in path:
        if not isinstance(value, dict) or part not in value:
            raise KeyError(
                f"algorithm.spin_target_key={key!r}: row {row}'s {column} has no {part!r} ({value!r})"
            )
        value = value[part]
    return value


def target_token_ids(
    tokenizer: Any, messages: list[dict], target: str, stop_ids: set[int], chat_kwargs: dict | None = None
) -> list[int]:
    """The tokens of ``target`` as the assistant's reply to ``messages``, as the model would generate
    them: what the chat template adds after the generation prompt (rendered as the RL dataset renders
    prompts, ``data.apply_chat_template_kwargs`` as ``chat_kwargs``), up to and including the first of
    the rollout's ``stop_ids`` (a chat template's turn separator after the end-of-turn token is not
    something a generation ever holds)."""
    kwargs = dict(chat_kwargs or {})

    def encode(conversation: list[dict], generation_prompt: bool) -> list[int]:
        text = tokenizer.apply_chat_template(
            conversation, add_generation_prompt=generation_prompt, tokenize=False, **kwargs
        )
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])

    prompt = encode(list(messages), True)
    full = encode([*messages, {"role": "assistant", "content": str(target)}], False)
    if full[: len(prompt)] != prompt:
        raise ValueError(
            "the chat template does not render a reply as a continuation of the generation prompt, so the "
            f"target {target!r} cannot be placed after the prompt {messages!r}"
        )
    reply = full[len(prompt) :]
    stops = [i for i, t in enumerate(reply) if t in stop_ids]
    return reply[: stops[0] + 1] if stops else reply


def stop_token_ids(model_path: str, tokenizer: Any, trust_remote_code: bool = False) -> set[int]:
    """The tokens a rollout stops at: the model's generation config EOS ids and the tokenizer's EOS
    (verl-workers' rollouts' rule), read on the driver from the model's files."""
    from transformers import AutoConfig, GenerationConfig

    try:
        generation = GenerationConfig.from_pretrained(model_path, trust_remote_code=trust_remote_code)
    except OSError:  # no generation_config.json: transformers derives it from the model config, as here
        generation = GenerationConfig.from_model_config(
            AutoConfig.from_pretrained(model_path, trust_remote_code=trust_remote_code)
        )
    eos = generation.eos_token_id
    ids = {int(e) for e in (eos if isinstance(eos, list | tuple) else [eos]) if e is not None}
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    if not ids:
        raise ValueError(f"{model_path}: neither the generation config nor the tokenizer names an EOS token")
    return ids


def pad_responses(tensors: dict[str, torch.Tensor], width: int, pad_token_id: int) -> dict[str, torch.Tensor]:
    """Right-pad the response part of rollout tensors to ``width`` tokens (positions keep counting)."""
    r = tensors["responses"].shape[1]
    extra = width - r
    if extra < 0:
        raise ValueError(f"cannot pad responses of {r} tokens down to {width}")
    out = dict(tensors)
    if extra == 0:
        return out
    for key, fill in _RESPONSE_FILL.items():
        if key in out:
            out[key] = torch.nn.functional.pad(
                out[key], (0, extra), value=pad_token_id if fill is None else fill
            )
    out["input_ids"] = torch.nn.functional.pad(out["input_ids"], (0, extra), value=pad_token_id)
    out["attention_mask"] = torch.nn.functional.pad(out["attention_mask"], (0, extra), value=0)
    last = out["position_ids"][:, -1:]
    out["position_ids"] = torch.cat(
        [out["position_ids"], last + torch.arange(1, extra + 1, dtype=last.dtype).unsqueeze(0)], dim=1
    )
    return out


def sft_pairs(batch: DataProto, targets: list[list[int]], pad_token_id: int, max_length: int) -> DataProto:
    """(target, own answer) row pairs from a generated batch with one answer per prompt.

    ``targets[i]`` are row i's target tokens (`target_token_ids`), cut at ``max_length`` like a
    generation would be. Returns 2N rows: the target rows (even) and the generated rows (odd) share
    the prompt and every non-tensor field. ``rollout_log_probs`` are dropped (a target was not sampled).
    """
    gen = {
        k: batch.batch[k]
        for k in ("prompts", "responses", "response_mask", "input_ids", "attention_mask", "position_ids")
    }
    n, p = gen["prompts"].shape
    if len(targets) != n:
        raise ValueError(f"{len(targets)} targets for {n} generated rows")
    cut = [list(t)[:max_length] for t in targets]
    if any(len(t) == 0 for t in cut):
        raise ValueError("an empty target: every chosen answer needs at least one token")
    width = max(gen["responses"].shape[1], max(len(t) for t in cut))
    gen = pad_responses(gen, width, pad_token_id)
    responses = torch.full((n, width), pad_token_id, dtype=gen["responses"].dtype)
    response_mask = torch.zeros((n, width), dtype=gen["response_mask"].dtype)
    for i, t in enumerate(cut):
        responses[i, : len(t)] = torch.tensor(t, dtype=responses.dtype)
        response_mask[i, : len(t)] = 1
    last = gen["position_ids"][:, p - 1 : p]
    positions = torch.cat([gen["position_ids"][:, :p], last + torch.arange(1, width + 1, dtype=last.dtype)], 1)
    target = generation_tensors(gen["prompts"], gen["attention_mask"][:, :p], responses, response_mask, positions)
    tensors = {k: torch.stack([target[k], gen[k]], dim=1).reshape(2 * n, *gen[k].shape[1:]) for k in gen}
    non_tensors = {k: np.repeat(v, 2, axis=0) for k, v in batch.non_tensor_batch.items()}
    return DataProto.from_dict(tensors=tensors, non_tensors=non_tensors, meta_info=dict(batch.meta_info))
