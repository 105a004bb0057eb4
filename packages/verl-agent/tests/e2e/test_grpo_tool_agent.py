"""End to end: GRPO on CPU teaches a tiny model to write the whole expression into a calculator call.

The task (``examples/tool_arithmetic.py``): two-digit additions ``23+45=``; the calculator computes
only the ``expression`` the model writes, and the reward is the final answer's exact match (core's
``arithmetic`` scorer). A tiny Qwen2 is warm-started (plain torch) on demonstrations the tool loop
produced for problems disjoint from the GRPO and held-out ones, by a sloppy demonstrator that on 30%
of its problems writes only the first operand (``warm_start.py``). The model so learns the call
format and to copy the tool's result, and writes an incomplete expression on about a third of
held-out problems. Then RayPPOTrainer runs GRPO with ``AgentActorRolloutRefWorker`` as the hybrid
actor/rollout/ref role on 2 FSDP2 ranks. The measure is held-out: the trainer's validation on 32
fixed test-split problems x 4 samples at temperature 1, before training and after the last step.
Accuracy and the share of calls carrying the problem's full expression must each rise by 0.05.
Everything is seeded (model init, warm start, data order, ``rollout.seed`` per worker and per row).
"""

import json
import math
import re
import sys
from pathlib import Path

import pytest
import torch

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

sys.path.insert(0, str(Path(__file__).parent))


WARM_STEPS = 1200
WARM_LR = 5e-3
STEPS = 12
LR = "5e-4"
SLOPPY = 0.3
VAL_N = 4


def _held_out(path: Path) -> tuple[float, float, int]:
    """(accuracy, share of calls with the problem's full expression, samples) of one validation dump."""
    records = [json.loads(line) for line in path.read_text().splitlines()]
    full = 0
    for r in records:
        problem = re.search(r"(\d+\+\d+)=", r["input"]).group(1)
        full += f'"expression": "{problem}"' in r["output"]
    return sum(r["score"] for r in records) / len(records), full / len(records), len(records)


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

    train_rows = make_tool_arithmetic_rows(64, seed=0, digits=2)
    val_rows = make_tool_arithmetic_rows(32, seed=0, digits=2, split="test")
    taken = {r["prompt"][0]["content"] for r in train_rows + val_rows}
    warm_rows = [
        r for r in make_tool_arithmetic_rows(320, seed=1, digits=2) if r["prompt"][0]["content"] not in taken
    ]
    assert len(warm_rows) >= 256  # disjoint from the GRPO prompts and the held-out ones

    torch.manual_seed(0)
    model_dir = tmp_path / "model"
    model = build_tiny_qwen2(model_dir, size="xs", seed=0)
    demos = demo_trajectories(
        warm_rows[:256], tokenizer, rollout_config(response_length=128), stop_ids, sloppy=SLOPPY, seed=0
    )
    warm_loss = warm_start(model, demos, steps=WARM_STEPS, lr=WARM_LR, batch=8)
    print(f"warm start: {WARM_STEPS} steps, last loss {warm_loss:.4f}")
    model.save_pretrained(str(model_dir))

    train = write_parquet(train_rows, tmp_path / "train.parquet")
    val = write_parquet(val_rows, tmp_path / "val.parquet")
    tools_yaml = tmp_path / "tools.yaml"
    tools_yaml.write_text("tools:\n  - class_name: calculator\n    config: {type: native}\n")
    out_dir = tmp_path / "out"
    cfg = load_config(
        [
            f"data.train_files={train}",
            f"data.val_files={val}",
            "data.train_batch_size=4",
            "data.val_batch_size=32",
            "data.max_prompt_length=32",
            "data.max_response_length=128",
            f"actor_rollout_ref.model.path={model_dir}",
            "actor_rollout_ref.model.enable_gradient_checkpointing=false",
            "actor_rollout_ref.rollout.name=hf",
            "actor_rollout_ref.rollout.n=8",
            "actor_rollout_ref.rollout.seed=42",
            "actor_rollout_ref.rollout.val_kwargs.do_sample=true",
            "actor_rollout_ref.rollout.val_kwargs.temperature=1.0",
            f"actor_rollout_ref.rollout.val_kwargs.n={VAL_N}",
            "actor_rollout_ref.rollout.agent.default_agent_loop=tool_agent",
            "actor_rollout_ref.rollout.agent.num_workers=8",
            "actor_rollout_ref.rollout.multi_turn.enable=true",
            f"actor_rollout_ref.rollout.multi_turn.tool_config_path={tools_yaml}",
            "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=3",
            "actor_rollout_ref.rollout.multi_turn.tokenization_sanity_check_mode=strict",
            "actor_rollout_ref.actor.use_kl_loss=false",
            "actor_rollout_ref.actor.ppo_mini_batch_size=2",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8",
            "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=16",
            "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=16",
            f"actor_rollout_ref.actor.optim.lr={LR}",
            "actor_rollout_ref.actor.optim.lr_warmup_steps=3",
            "algorithm.adv_estimator=grpo",
            "trainer.device=cpu",
            "trainer.nnodes=1",
            "trainer.n_gpus_per_node=2",
            f"trainer.total_training_steps={STEPS}",
            "trainer.logger=[console,jsonl]",
            "trainer.val_before_train=true",
            f"trainer.test_freq={STEPS}",
            f"trainer.validation_data_dir={tmp_path / 'val'}",
            "trainer.save_freq=-1",
            "trainer.progress_bar=false",
            f"trainer.default_local_dir={out_dir}",
        ]
    )
    validate_config(cfg)
    tok = hf_tokenizer(str(model_dir))
    mapping = {Role.ActorRollout: AgentActorRolloutRefWorker}
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
        val_dataset=create_rl_dataset(cfg.data.val_files, cfg.data, tok),
        collate_fn=collate_fn,
    )
    trainer.init_workers()
    try:
        trainer.fit()
    finally:
        trainer.shutdown()
    steps = [json.loads(line) for line in (out_dir / "metrics.jsonl").read_text().splitlines()]
    train_steps = [s for s in steps if "agent/well_formed_tool_call" in s]
    assert len(train_steps) == STEPS
    for s in train_steps:
        assert s["agent/tokenization_mismatch"] == 0
        assert math.isfinite(s["actor/pg_loss"])
    before_acc, before_full, n0 = _held_out(tmp_path / "val" / "0.jsonl")
    after_acc, after_full, n1 = _held_out(tmp_path / "val" / f"{STEPS}.jsonl")
    assert n0 == n1 == 32 * VAL_N
    print("train accuracy per step:", [round(s["critic/score/mean"], 3) for s in train_steps])
    print(
        "train well-formed call share per step:",
        [round(s["agent/well_formed_tool_call"], 3) for s in train_steps],
    )
    print(
        f"held-out accuracy {before_acc:.3f} -> {after_acc:.3f}, full-expression calls {before_full:.3f} -> {after_full:.3f}"
    )
    # the seeded run: accuracy 0.094 -> 0.188, full-expression calls 0.391 -> 0.492 (128 samples each)
    assert after_acc >= before_acc + 0.05
    assert after_full >= before_full + 0.05
