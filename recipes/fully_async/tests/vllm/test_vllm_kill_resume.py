"""SIGKILL of the vLLM rollout pool's worker mid-run, then a resume: the requests in flight at the checkpoint
are dropped and their prompts generated again, nothing is trained twice or lost, the staleness bound holds
across the resume (the checks: ../kill_resume.py). Marked ``vllm``: runs in envs/vllm-cpu."""

import pytest

from ..kill_resume import resume_and_check, run_and_kill

pytestmark = [pytest.mark.vllm, pytest.mark.e2e, pytest.mark.slow]


def test_kill_the_vllm_rollout_worker_then_resume(ray_cluster, tmp_path, assets):
    out = tmp_path / "run"
    args = [
        *assets,
        "actor_rollout_ref.rollout.name=vllm",
        "actor_rollout_ref.rollout.mode=async",
        "actor_rollout_ref.rollout.dtype=float32",
        f"+actor_rollout_ref.rollout.engine_kwargs.vllm.kv_cache_memory_bytes={64 << 20}",
        "trainer.total_training_steps=6",
        "trainer.save_freq=2",
        "trainer.test_freq=-1",
        "trainer.val_before_train=false",
        "trainer.resume_mode=auto",
        f"trainer.default_local_dir={out}",
    ]
    run_and_kill(
        ray_cluster.get_runtime_context().gcs_address, out, args, "rollout", tmp_path / "killed.log", 2
    )
    resume_and_check(out, args, total_steps=6, window_samples=2 * 16, staleness=0.5)
