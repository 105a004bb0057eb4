"""CPU smoke test: the recipe's default config end to end (assets, SFT warm start, Ray workers, core's loop
with the SPPO estimator and loss, tracker).

Only the warm start is shortened; learning is shown by the README's measured run.
"""

import json

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


# 4 prompts x 8 answers a step, validated at the end only
SHORT_RUN = ("trainer.test_freq=2", "trainer.val_before_train=false", "data.train_batch_size=4",
             "actor_rollout_ref.actor.ppo_mini_batch_size=4", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16")  # fmt: skip


@pytest.fixture
def sppo_run(recipe_run, monkeypatch):
    """The recipe's command on its CPU default with a 4-step warm start (it only needs to exist)."""
    from verl_recipe_sppo import main_sppo

    monkeypatch.setattr(main_sppo, "WARM_START_STEPS", 4)
    return lambda steps, *overrides: recipe_run(main_sppo.RECIPE, steps, *overrides)


def test_cpu_default_runs_end_to_end(ray_cluster, sppo_run):
    metrics, rows, out = sppo_run(2, *SHORT_RUN)
    # the SPPO loss ran in the workers (its metrics) on the win-rate targets of 4 prompts x 8 answers
    assert {"actor/log_ratio_mean", "actor/preference_mean", "actor/pg_loss"} <= metrics.keys()
    assert -0.5 <= metrics["critic/advantages/min"] <= metrics["critic/advantages/max"] <= 0.5
    assert abs(metrics["actor/log_ratio_mean"]) < 1e-3  # one update from the sampling policy: ratio 1
    assert [r["step"] for r in rows if "actor/pg_loss" in r] == [1, 2]
    assert "val/arithmetic/reward" in metrics
    assert json.loads((out / "assets" / "warm_start.json").read_text())["sft_steps"] == 4


def test_upstreams_setting_runs_end_to_end(ray_cluster, sppo_run):
    """Upstream's SPPO: one answer per prompt, A = r - softmean over the whole batch (not refused)."""
    one_answer = ("trainer.test_freq=-1", "trainer.val_before_train=false", "algorithm.adv_estimator=sppo",
                  "actor_rollout_ref.rollout.n=1", "data.train_batch_size=4",
                  "actor_rollout_ref.actor.ppo_mini_batch_size=4",
                  "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2")  # fmt: skip
    _, rows, _ = sppo_run(1, *one_answer)
    (step,) = [r for r in rows if "actor/pg_loss" in r]
    # 4 rows with rewards in {0, 1}: each advantage is r - softmean_1(r), inside (-1, 1)
    assert -1 < step["critic/advantages/min"] <= step["critic/advantages/max"] < 1
    assert {"actor/log_ratio_mean", "actor/preference_mean"} <= step.keys()
