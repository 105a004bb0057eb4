"""CPU smoke test: the recipe's default config end to end (assets, SFT warm start, Ray workers with the
reference in the actor's process, SPIN's stages, the DPO loss, the reference refresh, tracker).

Only the warm start is shortened; learning is shown by the README's measured run.
"""

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_cpu_default_runs_end_to_end(ray_cluster, recipe_run, monkeypatch):
    from verl_recipe_spin import main_spin

    monkeypatch.setattr(main_spin, "WARM_START_STEPS", 4)
    metrics, rows, _ = recipe_run(
        main_spin.RECIPE,
        2,
        "trainer.test_freq=2",
        "trainer.val_before_train=false",
        "trainer.ref_update_freq=2",
        "data.train_batch_size=4",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",  # one pair per forward
    )
    # the DPO loss ran in the workers on 4 (target, own answer) pairs
    assert {"actor/dpo_margin", "actor/dpo_accuracy", "actor/pg_loss", "spin/logp_margin"} <= metrics.keys()
    rows = {r["step"]: r for r in rows}
    assert rows[1]["spin/ref_refreshed"] == 0.0 and rows[2]["spin/ref_refreshed"] == 1.0
    # step 1 trains from the reference (sigmoid DPO at h = 0: log 2); step 2 starts from a fresh reference
    assert rows[1]["actor/pg_loss"] == pytest.approx(0.6931, abs=1e-3)
    assert rows[2]["spin/reward_margin"] == pytest.approx(0.0, abs=1e-5)
    assert rows[1]["spin/target_score/mean"] == 1.0  # the dataset's answers score full marks
    assert "val/arithmetic/reward" in metrics
