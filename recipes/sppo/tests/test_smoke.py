"""CPU smoke test: the recipe's default config end to end (assets, SFT warm start, Ray workers, core's loop
with the SPPO estimator and loss, tracker).

Only the warm start is shortened; learning is shown by the README's measured run.
"""

import json

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


# two steps of 4 prompts x 8 answers, validated at the end only
SHORT_RUN = ("trainer.total_training_steps=2", "trainer.test_freq=2", "trainer.val_before_train=false",
             "data.train_batch_size=4", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
             "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16")  # fmt: skip


def test_cpu_default_runs_end_to_end(ray_cluster, tmp_path, monkeypatch):
    from verl_recipe_sppo import main_sppo

    monkeypatch.setattr(main_sppo, "WARM_START_STEPS", 4)  # the warm start only needs to exist
    out = tmp_path / "run"
    metrics = main_sppo.RECIPE.train([*SHORT_RUN, f"trainer.default_local_dir={out}"])
    assert metrics["training/global_step"] == 2
    # the SPPO loss ran in the workers (its metrics) on the win-rate targets of 4 prompts x 8 answers
    assert {"actor/log_ratio_mean", "actor/preference_mean", "actor/pg_loss"} <= metrics.keys()
    assert -0.5 <= metrics["critic/advantages/min"] <= metrics["critic/advantages/max"] <= 0.5
    assert abs(metrics["actor/log_ratio_mean"]) < 1e-3  # one update from the sampling policy: ratio 1
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "actor/pg_loss" in r] == [1, 2]
    assert (out / "reward_curve.png").is_file() and "val/arithmetic/reward" in metrics
    assert json.loads((out / "assets" / "warm_start.json").read_text())["sft_steps"] == 4
