"""SIGKILL of the rollout pool's worker or of the trainer pool's worker mid-run, then a resume from the last
checkpoint: nothing counted twice, nothing lost, the staleness bound holds across the resume (the checks:
kill_resume.py). The native engine; the vLLM variant is tests/vllm/test_vllm_kill_resume.py."""

import pytest

from .kill_resume import resumable_args, resume_and_check, run_and_kill

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.mark.parametrize("victim", ["rollout", "trainer"])
def test_kill_a_pool_worker_then_resume(ray_cluster, tmp_path, assets, victim):
    out = tmp_path / "run"
    args = resumable_args(assets, out, "async_training.partial_rollout_step_tokens=1")
    run_and_kill(ray_cluster.get_runtime_context().gcs_address, out, args, victim, tmp_path / "killed.log", 2)
    resume_and_check(out, args, total_steps=6, window_samples=2 * 16, staleness=0.5)
