"""What the trainer writes about its generations (upstream's keys and file names).

``trainer.rollout_data_dir`` / ``trainer.validation_data_dir``: ``{dir}/{global_step}.jsonl``, one
JSON object per trajectory with ``input`` (the prompt text), ``output`` (the response text), ``gts``
(``reward_model.ground_truth``), ``score`` (the summed token-level score), ``step``, and every reward
extra-info key the reward function returned for that trajectory.

``trainer.log_val_generations=N``: :func:`pick_samples` chooses N validation samples the way upstream
does (sorted by input, shuffled with a fixed seed, first N), so the same prompts are followed across
steps; the trackers show them as a table (``verl.utils.tracking.Tracking.log_generations``).
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

from verl.protocol import DataProto

#: meta_info key under which the reward stage lists the reward extra-info keys it added to a batch
REWARD_EXTRA_KEYS = "reward_extra_keys"


def decode_texts(batch: DataProto, tokenizer: Any) -> tuple[list[str], list[str]]:
    """Prompt and response texts of every row: only the real tokens (attention / response masks),
    decoded without special tokens."""
    b = batch.batch
    prompts, responses = b["prompts"], b["responses"]
    prompt_mask = b["attention_mask"][:, : prompts.shape[1]].bool()
    response_mask = b["response_mask"].bool()
    inputs = [tokenizer.decode(prompts[i][prompt_mask[i]].tolist(), skip_special_tokens=True) for i in range(len(batch))]
    outputs = [
        tokenizer.decode(responses[i][response_mask[i]].tolist(), skip_special_tokens=True) for i in range(len(batch))
    ]
    return inputs, outputs


def ground_truths(batch: DataProto) -> list[Any]:
    """``reward_model.ground_truth`` of every row (None where a row has none)."""
    column = batch.non_tensor_batch.get("reward_model")
    if column is None:
        return [None] * len(batch)
    return [dict(rm).get("ground_truth") if rm is not None else None for rm in column]


def generation_records(
    inputs: list[str], outputs: list[str], gts: list[Any], scores: list[float], extra: dict[str, list], step: int
) -> list[dict[str, Any]]:
    """One record per trajectory (see the module doc); extra-info lists of another length are left out."""
    n = len(inputs)
    columns: dict[str, list] = {"input": inputs, "output": outputs, "gts": gts, "score": scores, "step": [step] * n}
    for key, values in extra.items():
        if len(values) == n and key not in columns:
            columns[key] = list(values)
    return [{k: _plain(v[i]) for k, v in columns.items()} for i in range(n)]


def write_generations(dump_dir: str, step: int, records: list[dict[str, Any]]) -> str:
    """Write ``{dump_dir}/{step}.jsonl`` (replacing a file of the same step); returns its path."""
    os.makedirs(dump_dir, exist_ok=True)
    path = os.path.join(dump_dir, f"{step}.jsonl")
    with open(path, "w", encoding="utf-8") as f:
        for record in records:
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
    return path


def rollout_records(batch: DataProto, tokenizer: Any, step: int) -> list[dict[str, Any]]:
    """The records of a trained batch: texts, ground truths, ``token_level_scores`` summed, reward extras."""
    inputs, outputs = decode_texts(batch, tokenizer)
    scores = batch.batch["token_level_scores"].sum(-1).tolist()
    extra = {k: list(batch.non_tensor_batch[k]) for k in batch.meta_info.get(REWARD_EXTRA_KEYS, [])
             if k in batch.non_tensor_batch}
    return generation_records(inputs, outputs, ground_truths(batch), scores, extra, step)


def pick_samples(inputs: list[str], outputs: list[str], scores: list[float], n: int) -> list[tuple[str, str, float]]:
    """``n`` of the validation samples: sorted by input, shuffled with seed 42, the first ``n``."""
    samples = sorted(zip(inputs, outputs, [float(s) for s in scores], strict=True), key=lambda s: s[0])
    np.random.RandomState(42).shuffle(samples)
    return samples[:n]


def _plain(value: Any) -> Any:
    """A JSON-friendly value: numpy scalars and arrays become Python numbers and lists."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)
