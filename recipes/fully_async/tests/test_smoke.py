"""CPU smoke test of the entry point: the default config (one rollout worker, one trainer worker) end to end,
with the staleness bound checked on every sync window of the run's own metrics."""

import json

import pytest

from .runs import check_two_sync_windows, one_step_off_log, train

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_cpu_default_runs_end_to_end(ray_cluster, tmp_path, assets):
    from verl_recipe_fully_async.main import RECIPE

    out = tmp_path / "run"
    metrics, log = train(RECIPE, out, *assets, "trainer.total_training_steps=4", "trainer.test_freq=4")
    assert metrics["training/global_step"] == 4
    check_two_sync_windows(log)
    assert all(r["fully_async/staleness/max"] <= 1 for r in log)
    assert metrics["response_length/max"] <= 6 and metrics["perf/total_num_tokens"] > 0
    summary = json.loads((out / "async_summary.json").read_text())
    assert summary["samples"] == 64 and summary["steps"] == 4
    assert 0 <= summary["trainer_idle_ratio"] <= 1 and 0 <= summary["rollout_idle_ratio"] <= 1
    assert "val-core/arithmetic/reward/mean@1" in summary["validation"]
    assert (out / "reward_curve.png").is_file()


def test_one_step_off_is_exactly_one_step_stale(ray_cluster, tmp_path, assets):
    """The one-step-off preset (same package): batch k is trained at version k from version k-1 weights."""
    log = one_step_off_log(tmp_path / "run", *assets)
    assert [r["fully_async/staleness/max"] for r in log] == [0, 1, 1]
    # old log-probs recomputed by the trainer (upstream's one-step-off): the step's one update starts at
    # ratio exactly 1 even on one-step-stale samples (with use_rollout_log_probs=true this run logs
    # actor/ppo_kl of -7e-9, -1e-8, -6e-10: another engine's numbers, then stale weights)
    assert all(r["actor/ppo_kl"] == 0.0 and r["actor/pg_clipfrac"] == 0.0 for r in log)
    assert all("timing_s/old_log_prob" in r for r in log)
