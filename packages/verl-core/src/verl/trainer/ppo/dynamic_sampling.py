"""Dynamic sampling (``algorithm.filter_groups.*``, DAPO arXiv 2503.14476), as plain functions and a
small accumulator (no Ray, no workers).

A *group* is the ``rollout.n`` trajectories of one prompt (rows sharing a ``uid``). A group whose filter
metric is the same for every trajectory (all right or all wrong) has zero advantage under GRPO and
contributes no gradient, so it is dropped and ``data.gen_batch_size``-prompt batches are generated until
``data.train_batch_size`` groups with varied outcomes are collected; the surplus is trimmed away.

`GroupAccumulator` holds that state between generation rounds; the trainer's ``filter`` stage
(``RayPPOTrainer.stage_filter``) drives it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from verl.protocol import DataProto

# Full-sequence tensors ([N, P + R]) that the rollout returns; every other 2-D tensor except ``prompts``
# is response-aligned ([N, R]).
_FULL_SEQUENCE_KEYS = ("input_ids", "attention_mask", "position_ids")


class DynamicSamplingError(RuntimeError):
    """Dynamic sampling used up ``algorithm.filter_groups.max_num_gen_batches`` without a full batch."""


def metric_values(batch: DataProto, metric: str) -> np.ndarray:
    """One float per row for the filter metric.

    ``seq_reward`` / ``seq_final_reward`` sum ``token_level_scores`` over the response (the filter runs
    before the KL-in-reward step, which DAPO leaves off); any other name is a per-row column the reward
    manager put in ``non_tensor_batch`` (``acc``, ``score``, ... from the scorer's dict).
    """
    if metric in ("seq_reward", "seq_final_reward"):
        return batch.batch["token_level_scores"].sum(-1).double().numpy()
    if metric not in batch.non_tensor_batch:
        raise KeyError(
            f"algorithm.filter_groups.metric={metric!r} is not in the scored batch; per-row columns: "
            f"{sorted(batch.non_tensor_batch)}, or seq_reward / seq_final_reward (summed token_level_scores)"
        )
    values = batch.non_tensor_batch[metric]
    try:
        return np.asarray([float(v) for v in values], dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise TypeError(
            f"algorithm.filter_groups.metric={metric!r}: the column holds non-numbers ({e})"
        ) from e


def varied_group_rows(uids: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, int, int]:
    """Rows of the groups whose metric is not constant (a group of one trajectory always counts as varied).

    Returns ``(row indices in original order, kept groups, dropped groups)``.
    """
    if len(uids) != len(values):
        raise ValueError(f"{len(uids)} uids but {len(values)} metric values")
    by_uid: dict[str, list[int]] = {}
    for i, uid in enumerate(uids):
        by_uid.setdefault(uid, []).append(i)
    keep_uid = {uid: len(rows) == 1 or float(np.std(values[rows])) > 0.0 for uid, rows in by_uid.items()}
    rows = np.array([i for i, uid in enumerate(uids) if keep_uid[uid]], dtype=np.int64)
    kept = sum(keep_uid.values())
    return rows, kept, len(keep_uid) - kept


def pad_responses(batch: DataProto, length: int, pad_token_id: int, fill: dict[str, int] | None = None) -> DataProto:
    """Right-pad every response-aligned tensor of ``batch`` to ``length`` tokens (a new DataProto).

    Generation rounds return the longest response of their own batch, so batches from different rounds
    differ in R and must be brought to one R before ``DataProto.concat``. Padding follows the rollout's
    convention: pad id in ``responses``/``input_ids``, 0 in masks and scores (or ``fill[key]``), positions
    keep counting; ``prompts`` and non-tensors are unchanged.
    """
    fill = fill or {}
    r = batch.batch["responses"].shape[1]
    extra = length - r
    if extra < 0:
        raise ValueError(f"cannot pad responses of length {r} down to {length}")
    if extra == 0:
        return batch
    tensors: dict[str, torch.Tensor] = {}
    for key in batch.batch.keys():
        value = batch.batch[key]
        if key == "prompts" or value.dim() < 2:
            tensors[key] = value
        elif key == "position_ids":
            steps = torch.arange(1, extra + 1, dtype=value.dtype, device=value.device).unsqueeze(0)
            tensors[key] = torch.cat([value, value[:, -1:] + steps], dim=1)
        elif key in ("responses", "input_ids"):
            tensors[key] = torch.nn.functional.pad(value, (0, extra), value=pad_token_id)
        elif key in _FULL_SEQUENCE_KEYS or value.shape[1] == r:
            tensors[key] = torch.nn.functional.pad(value, (0, extra), value=fill.get(key, 0))
        else:
            raise ValueError(
                f"tensor {key!r} of shape {tuple(value.shape)} is neither [N, P+R] nor [N, R={r}]"
            )
    return DataProto.from_dict(
        tensors=tensors, non_tensors=dict(batch.non_tensor_batch), meta_info=dict(batch.meta_info)
    )


def concat_rounds(batches: list[DataProto], pad_token_id: int, fill: dict[str, int] | None = None) -> DataProto:
    """Concatenate generation rounds (rows in the given order), padding responses to the longest first."""
    if not batches:
        raise ValueError("no batches to concatenate")
    length = max(b.batch["responses"].shape[1] for b in batches)
    return DataProto.concat([pad_responses(b, length, pad_token_id, fill) for b in batches])


@dataclass
class GroupAccumulator:
    """Collects varied groups over generation rounds until ``train_batch_size`` groups are ready.

    Args:
        train_batch_size: groups (prompts) per training step.
        n: trajectories per group (``rollout.n``).
        metric: the filter metric (see `metric_values`).
        max_num_gen_batches: rounds allowed per step; ``<= 0`` means no limit.
        pad_token_id: used when rounds of different response lengths are joined.
    """

    train_batch_size: int
    n: int
    metric: str
    max_num_gen_batches: int = 0
    pad_token_id: int = 0

    def __post_init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Forget everything collected (after a batch was taken)."""
        self._parts: list[DataProto] = []
        self.num_groups = 0
        self.num_gen_batches = 0
        self.kept_groups = 0
        self.dropped_groups = 0
        self._metric_sum = 0.0  # over every generated trajectory, before filtering
        self._metric_count = 0

    @property
    def ready(self) -> bool:
        return self.num_groups >= self.train_batch_size

    def add(self, batch: DataProto) -> None:
        """Filter one scored generation round and keep its varied groups.

        Raises `DynamicSamplingError` when this round was the last one allowed and the batch is still short.
        """
        if len(batch) % self.n:
            raise ValueError(
                f"a generation round has {len(batch)} rows, not a multiple of rollout.n={self.n}"
            )
        self.num_gen_batches += 1
        values = metric_values(batch, self.metric)
        self._metric_sum += float(values.sum())
        self._metric_count += len(values)
        rows, kept, dropped = varied_group_rows(batch.non_tensor_batch["uid"], values)
        self.kept_groups += kept
        self.dropped_groups += dropped
        if kept:
            self._parts.append(batch if kept * self.n == len(batch) else batch.select_idxs(rows))
            self.num_groups += kept
        limit = self.max_num_gen_batches
        if not self.ready and limit > 0 and self.num_gen_batches >= limit:
            raise DynamicSamplingError(
                f"dynamic sampling: {self.num_gen_batches} generation batches (algorithm.filter_groups."
                f"max_num_gen_batches={limit}) gave {self.num_groups} groups with a varied "
                f"{self.metric!r}, fewer than data.train_batch_size={self.train_batch_size} "
                f"({self.kept_groups} kept, {self.dropped_groups} dropped as all-equal). The task is too easy or "
                "too hard for the policy: raise max_num_gen_batches (0 = no limit) or data.gen_batch_size, "
                "or use data the policy solves sometimes"
            )

    def take(self) -> tuple[DataProto, dict[str, float]]:
        """The training batch (exactly ``train_batch_size`` groups, in arrival order) and this step's
        metrics; then reset for the next step.

        ``train/num_gen_batches`` (upstream's name: generation rounds this step took),
        ``dynamic_sampling/kept_groups`` / ``dropped_groups`` (over those rounds), ``kept_group_ratio``,
        and ``dynamic_sampling/all_<metric>/mean``, the filter metric averaged over every trajectory
        generated this step (before filtering: the policy's actual score, where ``critic/score/mean`` of
        the kept groups is not)."""
        if not self.ready:
            raise RuntimeError(f"only {self.num_groups} of {self.train_batch_size} groups collected")
        batch = concat_rounds(self._parts, self.pad_token_id)
        rows = self.train_batch_size * self.n
        if len(batch) > rows:
            batch = batch.slice(0, rows)  # groups are contiguous, so this keeps whole groups
        metrics = {
            "train/num_gen_batches": float(self.num_gen_batches),
            "dynamic_sampling/kept_groups": float(self.kept_groups),
            "dynamic_sampling/dropped_groups": float(self.dropped_groups),
            "dynamic_sampling/kept_group_ratio": self.kept_groups / max(self.kept_groups + self.dropped_groups, 1),
            # The policy's score on everything it generated this step; the trained batch's own mean
            # (critic/score/mean) is biased towards the middle by the filter.
            f"dynamic_sampling/all_{self.metric}/mean": self._metric_sum / max(self._metric_count, 1),
        }
        self.reset()
        return batch, metrics


def group_accumulator_for(config: Any, pad_token_id: int | None) -> GroupAccumulator | None:
    """The accumulator ``algorithm.filter_groups`` asks for, or None when dynamic sampling is off."""
    fg = config.algorithm.filter_groups
    if not fg.enable:
        return None
    return GroupAccumulator(
        train_batch_size=int(config.data.train_batch_size),
        n=int(config.actor_rollout_ref.rollout.n),
        metric=str(fg.metric),
        max_num_gen_batches=int(fg.max_num_gen_batches),
        pad_token_id=int(pad_token_id) if pad_token_id is not None else 0,
    )
