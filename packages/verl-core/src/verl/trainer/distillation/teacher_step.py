"""The trainer's teacher step: every row's teacher log-probs, from the teacher its ``teacher_key`` picks."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from verl.protocol import DataProto
from verl.trainer.distillation.teacher_pool import SINGLE

# what a teacher reads: the student's prompt + response, and the rows' fields for a privileged context
_TEACHER_INPUTS = ("input_ids", "attention_mask", "position_ids", "responses")


def route(batch: DataProto, teacher_keys: list[str], teacher_key: str) -> dict[str, np.ndarray]:
    """``{routing key: row indices}``. One teacher (`SINGLE`) scores every row; with several, row i goes
    to the teacher whose ``key`` equals ``non_tensor_batch[teacher_key][i]``."""
    if teacher_keys == [SINGLE]:
        return {SINGLE: np.arange(len(batch))}
    if teacher_key not in batch.non_tensor_batch:
        raise KeyError(
            f"distillation.teacher_key={teacher_key!r} is not a column of the batch "
            f"(columns: {sorted(batch.non_tensor_batch)}); the teachers are routed by it"
        )
    values = np.array([str(v) for v in batch.non_tensor_batch[teacher_key]], dtype=object)
    unknown = sorted(set(values) - set(teacher_keys))
    if unknown:
        raise KeyError(
            f"rows with {teacher_key}={unknown} have no teacher: distillation.teacher_models keys are {teacher_keys}"
        )
    return {key: np.flatnonzero(values == key) for key in teacher_keys}


def compute_teacher_log_probs(batch: DataProto, teachers: dict[str, Any], distillation: Any, metrics: dict) -> DataProto:
    """Add ``teacher_logprobs`` and ``teacher_ids`` [N, R, K] (see verl-workers' ``TeacherWorker``) to
    ``batch`` and return it; ``metrics`` gets the rows each teacher scored (``distillation/rows/<key>``)."""
    routes = route(batch, list(teachers), str(distillation.teacher_key))
    inputs = batch.select(batch_keys=list(_TEACHER_INPUTS), non_tensor_batch_keys=list(batch.non_tensor_batch))
    log_probs: torch.Tensor | None = None
    ids: torch.Tensor | None = None
    for key, rows in routes.items():
        metrics[f"distillation/rows/{key}"] = float(len(rows))
        if len(rows) == 0:
            continue
        out = teachers[key].compute_teacher_log_probs(inputs.select_idxs(rows))
        lp, tid = out.batch["teacher_logprobs"], out.batch["teacher_ids"]
        if log_probs is None:
            log_probs = torch.zeros((len(batch), *lp.shape[1:]), dtype=lp.dtype)
            ids = torch.zeros((len(batch), *tid.shape[1:]), dtype=tid.dtype)
        index = torch.as_tensor(rows, dtype=torch.long)
        log_probs[index], ids[index] = lp, tid
    batch.batch["teacher_logprobs"] = log_probs
    batch.batch["teacher_ids"] = ids
    return batch
