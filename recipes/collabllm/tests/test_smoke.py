"""CPU smoke test: the recipe's default config end to end (task, warm start, the rule-based user over HTTP,
Ray workers running collabllm_agent, the MR manager, the tracker).

Only the warm start and the run are shortened; learning is shown by the README's measured run.
"""

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_cpu_default_runs_end_to_end(ray_cluster, recipe_run, monkeypatch):
    from verl_recipe_collabllm import cpu_assets
    from verl_recipe_collabllm.main import RECIPE

    monkeypatch.setattr(cpu_assets, "WARM_START_STEPS", 30)
    metrics, rows, out = recipe_run(RECIPE, 2, "trainer.test_freq=2")
    # every trained turn was continued (or scored as it stood when cut off) and scored by the MR manager
    assert metrics["agent/future_rollouts"] + 3 * metrics["agent/first_turn_cut"] > 0
    assert metrics["reward_extra/num_conversations/mean"] >= 1
    assert 0.0 <= metrics["reward_extra/first_turn_question/mean"] <= 1.0
    assert -1.0 <= metrics["reward_extra/score/mean"] <= 1.0 and metrics["collabllm/metric_errors"] == 0
    assert [r["step"] for r in rows if "reward_extra/score/mean" in r] == [1, 2]
    interaction = (out / "assets" / "rule_user_interaction.yaml").read_text()
    assert "api_base: http://127.0.0.1:" in interaction  # the simulated user was served over HTTP
    assert "val-aux/arithmetic/first_turn_question/mean@8" in metrics
