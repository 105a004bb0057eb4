"""What the recipe's end-to-end tests share, on the native engine (tests/) and on vLLM (tests/vllm): vLLM's
rollout settings, the run's per-step log, and the one-step-off preset's run, whose staleness is the same
whichever engine generates."""

from __future__ import annotations

import json
import math
from pathlib import Path

VLLM = [
    "actor_rollout_ref.rollout.name=vllm",
    "actor_rollout_ref.rollout.mode=async",
    "actor_rollout_ref.rollout.dtype=float32",
    f"+actor_rollout_ref.rollout.engine_kwargs.vllm.kv_cache_memory_bytes={64 << 20}",
]


def train(recipe, out: Path, *overrides: str) -> tuple[dict, list[dict]]:
    """``recipe.train`` writing to ``out``: (the last step's metrics, the tracker's row of every step)."""
    metrics = recipe.train([*overrides, f"trainer.default_local_dir={out}"])
    return metrics, version_log(out)


def version_log(out: Path) -> list[dict]:
    """The tracker's rows of ``out/metrics.jsonl`` that carry the fully_async metrics (one a step)."""
    rows = [json.loads(line) for line in open(out / "metrics.jsonl") if line.strip()]
    return [r for r in rows if "fully_async/param_version" in r]


def check_two_sync_windows(log: list[dict]) -> None:
    """Four steps of the CPU default (a weight sync every 2 steps of 16 samples, staleness_threshold 0.5):
    steps 1-2 train at version 0, steps 3-4 at version 1, and each window holds at most floor(0.5 x 2 x 16)
    stale samples."""
    assert [r["step"] for r in log] == [1, 2, 3, 4]
    assert [r["fully_async/param_version"] for r in log] == [0, 0, 1, 1]
    bound = math.floor(0.5 * 2 * 16)  # staleness_threshold x trigger_parameter_sync_step x train_batch_size
    for window in (log[:2], log[2:]):
        assert sum(r["fully_async/stale_samples"] for r in window) <= bound


def one_step_off_log(out: Path, *overrides: str) -> list[dict]:
    """Three steps of the one-step-off preset: batch k is trained at version k from version k-1 weights,
    every sample of steps 2 and 3 one version stale. Returns the per-step log."""
    from verl_recipe_fully_async.main import ONE_STEP_OFF

    _, log = train(ONE_STEP_OFF, out, *overrides, "trainer.total_training_steps=3", "trainer.test_freq=-1",
                   "trainer.val_before_train=false")  # fmt: skip
    assert [r["fully_async/param_version"] for r in log] == [0, 1, 2]
    assert [r["fully_async/staleness/mean"] for r in log] == [0, 1, 1]  # every sample, not just some
    assert [r["fully_async/stale_samples"] for r in log] == [0, 16, 16]
    return log


def scoring_recorder(trained: list, calls: list) -> type:
    """A ``FullyAsyncRayTrainer`` (in this process) that appends every trained sample to ``trained`` and,
    when training ends, the size of each of its scorer's calls to ``calls``."""
    from verl_recipe_fully_async.trainer import FullyAsyncRayTrainer

    class Recording(FullyAsyncRayTrainer):
        def _sample_metrics(self, samples, version):
            trained.extend(samples)
            return super()._sample_metrics(samples, version)

        def fit(self):
            out = super().fit()
            calls.extend(self.rollouter.scorer.call_sizes)
            return out

    return Recording
