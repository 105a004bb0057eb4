"""A discriminative reward model on a pool of its own, scoring the samples vLLM streams as they arrive.
Marked ``vllm``: runs in envs/vllm-cpu."""

import pytest

from ..reward_model_run import run_with_reward_model

pytestmark = [pytest.mark.vllm, pytest.mark.e2e, pytest.mark.slow]


def test_reward_model_scores_vllm_samples_as_they_arrive(ray_cluster, tmp_path, assets):
    samples, last = run_with_reward_model(
        tmp_path,
        assets,
        [
            "actor_rollout_ref.rollout.name=vllm",
            "actor_rollout_ref.rollout.mode=async",
            "actor_rollout_ref.rollout.dtype=float32",
            f"+actor_rollout_ref.rollout.engine_kwargs.vllm.kv_cache_memory_bytes={64 << 20}",
        ],
    )
    assert last["training/global_step"] == 2
