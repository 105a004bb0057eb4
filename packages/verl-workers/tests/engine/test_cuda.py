"""GPU-only lines (skipped on CPU machines; none of these has run on this project's CPU CI):
``init_distributed('cuda')`` picks the device and NCCL, the engine moves CPU micro-batches to the GPU,
FSDP2's MixedPrecisionPolicy keeps fp32 masters, the rollout's "still running" flag and response-length
all-reduce go through NCCL on GPU tensors."""

import os

import pytest
import torch

pytestmark = pytest.mark.gpu


def _job(rank, world, model_dir, port):
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=port)
    import torch.distributed as dist
    from verl.trainer.config import load_config
    from verl.workers.engine import build_engine
    from verl.workers.engine.testing import chat_prompt_batch, make_rl_batch
    from verl.workers.fsdp_workers import init_distributed
    from verl.workers.rollout import HFRollout, NativeRollout
    from verl.workers.tokenizer import hf_tokenizer

    device = init_distributed("cuda", seed=1)
    assert device == torch.device("cuda", rank) and dist.get_backend() == "nccl"
    cfg = load_config([f"actor_rollout_ref.model.path={model_dir}", "actor_rollout_ref.model.model_dtype=bfloat16",
                       "actor_rollout_ref.model.enable_gradient_checkpointing=false"])
    arr = cfg.actor_rollout_ref
    engine = build_engine("fsdp2", model_config=arr.model, engine_config=arr.actor.fsdp_config,
                          optim_config=arr.actor.optim, total_training_steps=2)
    assert engine.device.type == "cuda"
    assert all(p.dtype == torch.float32 for p in engine.module.parameters())
    batch = make_rl_batch(n=4, seed=rank).batch  # CPU tensors, as the trainer sends them

    def nll(out, mb):
        return -(out["log_probs"] * mb["response_mask"].to(out["log_probs"].device)).mean(), {}

    engine.forward_backward([batch], nll)
    assert engine.optimizer_step() > 0
    tok = hf_tokenizer(model_dir)
    prompts = chat_prompt_batch(tok, ["1+2=", "hi"] if rank == 0 else ["a much longer prompt here"])
    for cls in (HFRollout, NativeRollout):
        out = cls(engine.module, arr.rollout, tok, device=engine.device).generate_sequences(prompts)
        assert all(v.device.type == "cpu" for v in out.batch.values())
    dist.destroy_process_group()


def test_engine_and_rollouts_on_cuda(tiny_model_dir):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("", 0))
        port = str(s.getsockname()[1])
    world = min(2, torch.cuda.device_count())
    mp.start_processes(_job, args=(world, tiny_model_dir, port), nprocs=world, join=True, start_method="spawn")
