"""CPU smoke test: the recipe's default end to end (task, cold start through the tool loop and the sandbox,
Ray agent workers running tool_agent with the code interpreter, DAPO's trainer, the scorer, the tracker).

Only the sizes are shrunk (a few SFT steps, one RL step); learning is shown by the README's measured run.
Dynamic sampling is off here: a 5-step cold start answers nothing right, so every group would be dropped.
"""

import json

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_cpu_default_runs_end_to_end(ray_cluster, tmp_path):
    from verl_recipe_retool.main import RECIPE

    out = tmp_path / "run"
    metrics = RECIPE.train(
        [
            f"trainer.default_local_dir={out}",
            "trainer.total_training_steps=1",
            "trainer.test_freq=1",
            "retool.cold_start_steps=5",
            "retool.task_train_size=8",
            "retool.task_test_size=4",
            "data.train_batch_size=2",
            "data.gen_batch_size=2",
            "data.max_response_length=128",
            "actor_rollout_ref.rollout.n=2",
            "actor_rollout_ref.actor.ppo_mini_batch_size=2",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
            "algorithm.filter_groups.enable=false",
        ]
    )
    assert metrics["training/global_step"] == 1
    assert 0.0 <= metrics["val-core/retool_arith/acc/mean@1"] <= 1.0
    assert "val-aux/retool_arith/tool_correct/mean@1" in metrics
    assert "agent/tool_calls" in metrics and metrics["agent/tokenization_mismatch"] == 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "critic/score/mean" in r] == [1]
    assert (out / "reward_curve.png").is_file()
    saved = (out / "config.yaml").read_text()
    assert "code_interpreter_local.yaml" in saved
    assert "verl_recipe_retool/reward.py" in saved  # upstream's reward is what scored
    assert metrics["critic/score/max"] <= 1.0 and metrics["critic/score/min"] >= -1.0
