"""Fixtures for the vLLM rollout tests (marked ``vllm``: they run in envs/vllm-cpu, skip elsewhere)."""

import os

import pytest

# vLLM's engine in the test process: starts in seconds instead of spawning its engine-core and worker
# processes (20-30 s each on 2 cores). The rollout code is the same either way.
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

#: KV cache per engine: vLLM-CPU refuses to start without a size (or reserves gpu_memory_utilization of RAM)
KV_BYTES = 64 << 20


@pytest.fixture(scope="session")
def xs32_dirs(tmp_path_factory) -> dict[str, str]:
    """Tiny Qwen2 models with head_dim 32 (vLLM-CPU's smallest), tied and untied LM head."""
    from verl.workers.tiny import build_tiny_qwen2

    dirs = {}
    for name, tied in (("tied", True), ("untied", False)):
        path = tmp_path_factory.mktemp(f"xs32_{name}")
        build_tiny_qwen2(path, size="xs32", seed=0, tied=tied)
        dirs[name] = str(path)
    return dirs


def vllm_config(model_dir: str, *overrides: str):
    """A trainer config for one actor+rollout worker sampling with vLLM in fp32."""
    from verl.trainer.config import load_config

    return load_config([
        f"actor_rollout_ref.model.path={model_dir}",
        "actor_rollout_ref.model.enable_gradient_checkpointing=false",
        "data.train_batch_size=2", "data.max_prompt_length=32", "data.max_response_length=8",
        "actor_rollout_ref.rollout.n=2",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4",
        "actor_rollout_ref.actor.optim.lr=0.05", "actor_rollout_ref.actor.optim.weight_decay=0.0",
        "actor_rollout_ref.rollout.name=vllm", "actor_rollout_ref.rollout.dtype=float32",
        "actor_rollout_ref.rollout.calculate_log_probs=true",
        f"+actor_rollout_ref.rollout.engine_kwargs.vllm.kv_cache_memory_bytes={KV_BYTES}",
        *overrides,
    ])


def vllm_worker(model_dir: str, *overrides: str):
    """An initialised ``ActorRolloutRefWorker`` (role actor_rollout) in this process."""
    from verl.workers.fsdp_workers import ActorRolloutRefWorker

    cfg = vllm_config(model_dir, *overrides)
    w = ActorRolloutRefWorker(cfg.actor_rollout_ref, role="actor_rollout")
    w.init_model()
    return w
