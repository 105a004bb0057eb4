"""CPU smoke test: the recipe's default config end to end (assets, Ray workers, DAPO trainer, tracker).

Only the warm start is shortened (the policy then starts near 5-10 % right, so more groups are all
wrong and dynamic sampling has to work for its batch); learning is shown by the README's measured run.
"""

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_cpu_default_runs_end_to_end(ray_cluster, recipe_run, monkeypatch):
    from verl_recipe_dapo import cpu_assets
    from verl_recipe_dapo.main_dapo import RECIPE

    monkeypatch.setattr(cpu_assets, "WARM_START_STEPS", 40)
    metrics, rows, out = recipe_run(RECIPE, 2, "algorithm.filter_groups.max_num_gen_batches=0", "trainer.test_freq=2")
    # dynamic sampling ran and reported: every kept group counts, at least one round per step
    assert metrics["train/num_gen_batches"] >= 1 and metrics["dynamic_sampling/kept_groups"] >= 8
    assert 0.0 <= metrics["critic/score/mean"] <= 1.0
    # the trimmed batch holds exactly train_batch_size x n trajectories
    assert metrics["perf/total_num_tokens"] > 0 and metrics["response_length/max"] <= 8
    assert [r["step"] for r in rows if "train/num_gen_batches" in r] == [1, 2]  # the tracker wrote each step
    assert (out / "assets" / "tiny_qwen2_warm" / "config.json").is_file()
    assert "val/arithmetic/reward" in metrics
