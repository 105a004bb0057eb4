"""Validation: generate for the held-out prompts with ``rollout.val_kwargs``, score, report upstream's metrics.

``ValidationMixin`` is mixed into ``RayPPOTrainer``. ``validate`` is the hook a recipe extends (PRIME adds
its reward model's accuracy); ``validation_rollouts`` is the generation-and-scoring loop it can reuse.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from verl.protocol import DataProto
from verl.trainer.ppo.dumps import (
    decode_texts,
    generation_records,
    ground_truths,
    pick_samples,
    write_generations,
)
from verl.trainer.ppo.metric_utils import val_metrics_dict
from verl.trainer.ppo.reward import compute_reward

__all__ = ["ValidationMixin"]


class ValidationMixin:
    """Validation for ``RayPPOTrainer`` (expects its attributes)."""

    def validation_rollouts(self) -> Iterator[tuple[DataProto, torch.Tensor, dict[str, list]]]:
        """One pass over the validation set: per batch of prompts, ``(batch, reward_tensor, extra)``.

        Each prompt gets a ``uid`` (shared by its ``val_kwargs.n`` responses, the groups of best@k / maj@k),
        is repeated ``val_kwargs.n`` times and generated with ``val_kwargs``; the batch then holds the
        prompt and response tensors, ``reward_tensor`` the validation reward's token scores and ``extra``
        its per-sample columns.
        """
        val_kwargs = self.config.actor_rollout_ref.rollout.val_kwargs
        for batch_dict in self.val_dataloader:
            batch = DataProto.from_single_dict(batch_dict)
            if "uid" not in batch.non_tensor_batch:
                batch.non_tensor_batch["uid"] = np.array([str(uuid.uuid4()) for _ in range(len(batch))], dtype=object)
            batch = batch.repeat(val_kwargs.n, interleave=True)
            gen_batch = self.rollout_input(batch, do_sample=val_kwargs.do_sample, validate=True)
            output = self.actor_rollout_wg.generate_sequences(gen_batch)
            batch.pop(batch_keys=["input_ids", "attention_mask", "position_ids"])
            batch.union(DataProto(batch=output.batch, non_tensor_batch=output.non_tensor_batch, meta_info={}))
            reward_tensor, extra = compute_reward(batch, self.val_reward_fn)
            yield batch, reward_tensor, extra

    def validate(self) -> dict[str, float]:
        """Generate for the validation set with ``rollout.val_kwargs`` and score it with val_reward_fn.

        Returns upstream's metrics (``val-core/<data_source>/<var>/mean@N``, ``best@k``, ``maj@k`` ...,
        see ``val_metrics``) for ``reward`` and every numeric key the reward function returns, plus
        ``val/<data_source>/reward``, the mean score, which the progress bar and the reward plot read.
        With ``trainer.validation_data_dir`` every sample goes to ``{dir}/{step}.jsonl``; with
        ``trainer.log_val_generations=N``, N of them to the trackers as a table (``ppo.dumps``).
        """
        if self.val_dataloader is None:
            return {}
        t = self.config.trainer
        scores: list[float] = []
        sources: list[str] = []
        uids: list[str] = []
        turns: list[int] = []
        infos: dict[str, list] = defaultdict(list)
        texts: dict[str, list] = defaultdict(list)  # inputs, outputs, gts: only when a dump asks for them
        for batch, reward_tensor, extra in self.validation_rollouts():
            batch_scores = reward_tensor.sum(-1).tolist()
            _extend_infos(infos, len(scores), {**extra, "reward": batch_scores}, len(batch_scores))
            if t.validation_data_dir or t.log_val_generations > 0:
                inputs, outputs = decode_texts(batch, self.tokenizer)
                texts["inputs"] += inputs
                texts["outputs"] += outputs
                texts["gts"] += ground_truths(batch)
            scores.extend(batch_scores)
            sources.extend(batch.non_tensor_batch.get("data_source", np.array(["unknown"] * len(batch), dtype=object)))
            uids.extend(batch.non_tensor_batch["uid"])
            if "__num_turns__" in batch.non_tensor_batch:
                turns.extend(int(n) for n in batch.non_tensor_batch["__num_turns__"])
        if t.log_val_generations > 0:
            samples = pick_samples(texts["inputs"], texts["outputs"], scores, int(t.log_val_generations))
            self.logger.log_generations(samples, step=self.global_steps)
        if t.validation_data_dir:
            extra_all = {k: v for k, v in infos.items() if k != "reward"}
            records = generation_records(texts["inputs"], texts["outputs"], texts["gts"], scores, extra_all,
                                         self.global_steps)
            write_generations(t.validation_data_dir, self.global_steps, records)
        metrics = self.val_metrics_update(sources, uids, infos, turns)
        by_source: dict[str, list[float]] = defaultdict(list)
        for src, score in zip(sources, scores):
            by_source[str(src)].append(score)
        metrics.update({f"val/{src}/reward": float(np.mean(v)) for src, v in by_source.items()})
        return metrics

    def val_metrics_update(self, data_sources: list, sample_uids: list, reward_extra_infos_dict: dict[str, Any],
                           sample_turns: list) -> dict[str, float]:
        """The flat ``val-core`` / ``val-aux`` metrics of one validation pass (upstream's
        ``_val_metrics_update``)."""
        return val_metrics_dict(data_sources, sample_uids, reward_extra_infos_dict, sample_turns)


def _extend_infos(infos: dict[str, list], rows_before: int, batch_infos: dict[str, list], rows: int) -> None:
    """Append one batch's per-sample values; a key missing on either side is filled with None (skipped
    by the metrics), so every list stays aligned with the samples (compute_reward checked the lengths)."""
    for key, values in batch_infos.items():
        if key not in infos:
            infos[key] = [None] * rows_before
        infos[key].extend(values)
    for key, values in infos.items():
        if key not in batch_infos:
            values.extend([None] * rows)
