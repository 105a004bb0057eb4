"""A discriminative reward model on a pool of its own, scoring samples as they arrive (native engine; the
vLLM variant is tests/vllm/test_vllm_reward_model.py)."""

import pytest

from .reward_model_run import run_with_reward_model

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_reward_model_on_its_own_pool_scores_as_samples_arrive(ray_cluster, tmp_path, assets):
    samples, last = run_with_reward_model(tmp_path, assets, [])
    assert last["training/global_step"] == 2
