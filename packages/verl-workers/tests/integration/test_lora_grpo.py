"""GRPO with LoRA through the real trainer (main_ppo.run_ppo, Ray workers, native rollout on the merged
copy, reference = the actor with its adapters disabled): the adapters move, the base weights do not,
the KL to the reference starts at exactly 0 (B = 0: the actor is the base model) and then grows."""

import json
import os

import pytest
import torch

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_grpo_with_lora_trains_adapters_only(ray_cluster, tmp_path, tiny_model_dir):
    from safetensors.torch import load_file
    from verl.trainer.config import load_config, validate_config
    from verl.trainer.main_ppo import run_ppo
    from verl.utils.dataset import write_parquet
    from verl.utils.dataset.tasks import make_arithmetic_rows

    # a dense reward the random tiny model already earns some of (share of digits in the answer), so
    # GRPO's group-normalised advantages are not all zero
    reward_py = tmp_path / "digits.py"
    reward_py.write_text(
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):\n"
        "    return sum(c.isdigit() for c in solution_str) / max(len(solution_str), 1)\n"
    )
    train = write_parquet(
        make_arithmetic_rows(8, seed=0, digits=1, split="train"), tmp_path / "train.parquet"
    )
    out = tmp_path / "out"
    cfg = load_config(
        [
            f"data.train_files={train}",
            "data.train_batch_size=2",
            "data.max_prompt_length=32",
            "data.max_response_length=4",
            f"actor_rollout_ref.model.path={tiny_model_dir}",
            "actor_rollout_ref.model.enable_gradient_checkpointing=false",
            "actor_rollout_ref.model.lora_rank=4",
            "actor_rollout_ref.model.lora_alpha=8",
            "algorithm.adv_estimator=grpo",
            f"reward.custom_reward_function.path={reward_py}",
            "actor_rollout_ref.actor.use_kl_loss=true",
            "actor_rollout_ref.rollout.n=4",
            "actor_rollout_ref.actor.ppo_mini_batch_size=2",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8",
            "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8",
            "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=8",
            "actor_rollout_ref.actor.optim.lr=0.02",
            "trainer.device=cpu",
            "trainer.nnodes=1",
            "trainer.n_gpus_per_node=1",
            "trainer.total_training_steps=4",
            "trainer.logger=[console,jsonl]",
            "trainer.val_before_train=false",
            "trainer.test_freq=-1",
            "trainer.save_freq=4",
            "trainer.progress_bar=false",
            f"trainer.default_local_dir={out}",
        ]
    )
    validate_config(cfg)
    run_ppo(cfg)
    rows = [json.loads(line) for line in open(out / "metrics.jsonl")]
    steps = [r for r in rows if "actor/kl_loss" in r]
    assert len(steps) == 4
    assert all("critic/score/mean" in r for r in steps)  # the reward is measured every step
    assert all(r["actor/grad_norm"] > 0 for r in steps)  # non-zero advantages reach the adapters
    # the ref log-probs are the base model's: identical to the actor's before the first update
    assert steps[0]["actor/kl_loss"] == pytest.approx(0.0, abs=1e-7)
    assert steps[-1]["actor/kl_loss"] > 1e-6
    adapter = out / "global_step_4" / "actor" / "lora_adapter"
    tensors = load_file(os.path.join(adapter, "adapter_model.safetensors"))
    b = [v for k, v in tensors.items() if ".lora_B." in k]
    assert b and all(torch.isfinite(v).all() for v in b)
    assert max(float(v.abs().max()) for v in b) > 0  # B starts at 0: the adapters moved
