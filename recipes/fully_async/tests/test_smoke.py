"""CPU smoke test of the entry point: the default config (one rollout worker, one trainer worker) end to end,
with the staleness bound checked on every sync window of the run's own metrics."""

import json
import math

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def rows(path):
    return [json.loads(line) for line in open(path) if line.strip()]


def test_cpu_default_runs_end_to_end(ray_cluster, tmp_path, assets):
    from verl_recipe_fully_async.main import RECIPE

    out = tmp_path / "run"
    metrics = RECIPE.train(
        [*assets, "trainer.total_training_steps=4", "trainer.test_freq=4", f"trainer.default_local_dir={out}"]
    )
    assert metrics["training/global_step"] == 4
    log = [r for r in rows(out / "metrics.jsonl") if "fully_async/param_version" in r]
    assert [r["step"] for r in log] == [1, 2, 3, 4]
    # a weight sync every 2 steps: steps 1-2 train at version 0, steps 3-4 at version 1
    assert [r["fully_async/param_version"] for r in log] == [0, 0, 1, 1]
    bound = math.floor(0.5 * 2 * 16)  # staleness_threshold x trigger_parameter_sync_step x train_batch_size
    for window in (log[:2], log[2:]):
        assert sum(r["fully_async/stale_samples"] for r in window) <= bound
    assert all(r["fully_async/staleness/max"] <= 1 for r in log)
    assert metrics["response_length/max"] <= 6 and metrics["perf/total_num_tokens"] > 0
    summary = json.loads((out / "async_summary.json").read_text())
    assert summary["samples"] == 64 and summary["steps"] == 4
    assert 0 <= summary["trainer_idle_ratio"] <= 1 and 0 <= summary["rollout_idle_ratio"] <= 1
    assert "val-core/arithmetic/reward/mean@1" in summary["validation"]
    assert (out / "reward_curve.png").is_file()


def test_one_step_off_is_exactly_one_step_stale(ray_cluster, tmp_path, assets):
    """The one-step-off preset (same package): batch k is trained at version k from version k-1 weights."""
    from verl_recipe_fully_async.main import ONE_STEP_OFF

    out = tmp_path / "run"
    ONE_STEP_OFF.train(
        [
            *assets,
            "trainer.total_training_steps=3",
            "trainer.test_freq=-1",
            "trainer.val_before_train=false",
            f"trainer.default_local_dir={out}",
        ],
    )
    log = [r for r in rows(out / "metrics.jsonl") if "fully_async/param_version" in r]
    assert [r["fully_async/param_version"] for r in log] == [0, 1, 2]
    assert [r["fully_async/staleness/max"] for r in log] == [0, 1, 1]
    assert [r["fully_async/staleness/mean"] for r in log] == [0, 1, 1]  # every sample, not just some
    assert [r["fully_async/stale_samples"] for r in log] == [0, 16, 16]
    # old log-probs recomputed by the trainer (upstream's one-step-off): the step's one update starts at
    # ratio exactly 1 even on one-step-stale samples (with use_rollout_log_probs=true this run logs
    # actor/ppo_kl of -7e-9, -1e-8, -6e-10: another engine's numbers, then stale weights)
    assert all(r["actor/ppo_kl"] == 0.0 and r["actor/pg_clipfrac"] == 0.0 for r in log)
    assert all("timing_s/old_log_prob" in r for r in log)
