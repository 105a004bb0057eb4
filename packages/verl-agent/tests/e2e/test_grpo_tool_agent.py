"""End to end: GRPO on CPU where a tiny model uses a calculator tool over several turns.

The tiny Qwen2 is first warm-started (plain torch, 600 steps) on demonstrations the tool loop
itself produced, so it emits tool calls and mostly copies the tool's answer; then RayPPOTrainer runs GRPO with
`AgentActorRolloutRefWorker` as the hybrid actor/rollout/ref role: the trainer's generate stage
calls ``generate_sequences``, which runs ``tool_agent`` loops on each of 2 FSDP2 ranks (ranks make
different numbers of model calls), and the actor updates on the masked trajectories. The metrics must carry the tool-call rate and the reward.
"""

import math
import sys
from pathlib import Path

import pytest
import torch

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

sys.path.insert(0, str(Path(__file__).parent))


def test_grpo_with_tool_agent_on_cpu(ray_cluster, tmp_path, tokenizer, stop_ids, rollout_config):
    from verl.agent.examples.tool_arithmetic import make_tool_arithmetic_rows
    from verl.agent.worker import AgentActorRolloutRefWorker
    from verl.registries import REWARD_MANAGERS
    from verl.single_controller.ray import ResourcePoolManager
    from verl.trainer.config import load_config, validate_config
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer, Role
    from verl.utils.dataset import collate_fn, create_rl_dataset, write_parquet
    from verl.workers.tiny import build_tiny_qwen2
    from verl.workers.tokenizer import hf_tokenizer
    from warm_start import demo_trajectories, warm_start

    torch.manual_seed(0)
    model_dir = tmp_path / "model"
    model = build_tiny_qwen2(model_dir, size="xs", seed=0)
    demos = demo_trajectories(
        make_tool_arithmetic_rows(64, seed=1, digits=1),
        tokenizer,
        rollout_config(response_length=128),
        stop_ids,
    )
    loss = warm_start(model, demos, steps=600, lr=5e-3, batch=8)
    assert loss < 1.0, f"warm start did not learn the demonstrations (masked loss {loss:.3f})"
    model.save_pretrained(str(model_dir))

    train = write_parquet(make_tool_arithmetic_rows(8, seed=0, digits=1), tmp_path / "train.parquet")
    val = write_parquet(
        make_tool_arithmetic_rows(4, seed=0, digits=1, split="test"), tmp_path / "val.parquet"
    )
    tools_yaml = tmp_path / "tools.yaml"
    tools_yaml.write_text("tools:\n  - class_name: calculator\n    config: {}\n")
    cfg = load_config(
        [
            f"data.train_files={train}",
            f"data.val_files={val}",
            "data.train_batch_size=4",
            "data.max_prompt_length=32",
            "data.max_response_length=128",
            f"actor_rollout_ref.model.path={model_dir}",
            "actor_rollout_ref.model.enable_gradient_checkpointing=false",
            "actor_rollout_ref.rollout.name=hf",
            "actor_rollout_ref.rollout.n=4",
            "actor_rollout_ref.rollout.agent.default_agent_loop=tool_agent",
            "actor_rollout_ref.rollout.agent.num_workers=8",
            "actor_rollout_ref.rollout.multi_turn.enable=true",
            f"actor_rollout_ref.rollout.multi_turn.tool_config_path={tools_yaml}",
            "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=3",
            "actor_rollout_ref.rollout.multi_turn.tokenization_sanity_check_mode=strict",
            "actor_rollout_ref.actor.use_kl_loss=true",
            "actor_rollout_ref.actor.ppo_mini_batch_size=4",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
            "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=16",
            "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=16",
            "actor_rollout_ref.actor.optim.lr=0.0001",
            "algorithm.adv_estimator=grpo",
            "trainer.device=cpu",
            "trainer.nnodes=1",
            "trainer.n_gpus_per_node=2",
            "trainer.total_training_steps=2",
            "trainer.logger=[console]",
            "trainer.val_before_train=false",
            "trainer.test_freq=-1",
            "trainer.save_freq=-1",
            "trainer.progress_bar=false",
            f"trainer.default_local_dir={tmp_path / 'out'}",
        ]
    )
    validate_config(cfg)
    tok = hf_tokenizer(str(model_dir))
    mapping = {Role.ActorRolloutRef: AgentActorRolloutRefWorker}
    pools = ResourcePoolManager(
        resource_pool_spec={"global_pool": [2]},
        mapping={role: "global_pool" for role in mapping},
        use_gpu=False,
        num_cpus_per_worker=0.5,
    )
    reward = REWARD_MANAGERS.get("naive")
    trainer = RayPPOTrainer(
        config=cfg,
        tokenizer=tok,
        role_worker_mapping=mapping,
        resource_pool_manager=pools,
        reward_fn=reward(tokenizer=tok, num_examine=0),
        val_reward_fn=reward(tokenizer=tok, num_examine=0),
        train_dataset=create_rl_dataset(cfg.data.train_files, cfg.data, tok),
        val_dataset=create_rl_dataset(cfg.data.val_files, cfg.data, tok, is_train=False),
        collate_fn=collate_fn,
    )
    trainer.init_workers()
    metrics = trainer.fit()
    print({k: v for k, v in sorted(metrics.items()) if k.startswith(("agent/", "critic/score", "actor/"))})
    assert metrics["training/global_step"] == 2
    assert metrics["agent/has_tool_call"] > 0  # the tool-call rate
    assert metrics["agent/user_turns"] > 0  # tool answers were fed back: several turns
    assert metrics["agent/tokenization_mismatch"] == 0
    assert metrics["critic/score/mean"] > 0  # some answers read the tool's result correctly
    assert metrics["actor/grad_norm"] > 0  # the actor updated on the masked trajectories
    for key in ("critic/score/mean", "actor/pg_loss", "actor/kl_loss", "agent/num_turns"):
        assert math.isfinite(metrics[key]), key
