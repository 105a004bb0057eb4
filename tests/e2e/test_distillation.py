"""On-policy distillation end to end through ``main_ppo``: the teacher on its own pool (a Ray worker group
beside the student's two FSDP2 workers), the teacher step in the loop, the distillation term in the
student's update.

The teacher is the student's own start checkpoint. At step 1 (before any update) the two score the same
tokens identically, so the divergence is 0 to float precision: any misalignment of positions, temperature,
tokens or top-k ids between the teacher's pool and the student's sharded update would show. The task loss
(a shaped reward) then moves the student, the teacher stays frozen, and the divergence is no longer 0.
That the distillation term pulls a student toward a different teacher is checked on fixed batches in
verl-workers' tests/distillation, and over training in benchmarks/opd_vs_grpo.py.
"""

import json
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

STEPS = 3
SHAPED_REWARD = Path(__file__).with_name("shaped_reward.py")


@pytest.mark.parametrize("loss_mode", ["k3", "forward_kl_topk"])
def test_distillation_through_main_ppo(loss_mode, ray_cluster, task_data, tiny_chat_model, tmp_path):
    from verl.trainer import main_ppo

    main_ppo.main([
        f"data.train_files={task_data['train']}", f"data.val_files={task_data['test']}", "data.val_max_samples=8",
        f"actor_rollout_ref.model.path={tiny_chat_model}", "actor_rollout_ref.model.enable_gradient_checkpointing=false",
        "data.max_prompt_length=32", "data.max_response_length=4", "data.train_batch_size=4",
        "actor_rollout_ref.rollout.n=4", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8", "actor_rollout_ref.actor.optim.lr=1e-2",
        "actor_rollout_ref.rollout.temperature=1.0", "algorithm.adv_estimator=grpo",
        "trainer.device=cpu", "trainer.nnodes=1", "trainer.n_gpus_per_node=2", f"trainer.total_training_steps={STEPS}",
        "trainer.test_freq=-1", "trainer.val_before_train=false", "trainer.logger=[jsonl]", "trainer.progress_bar=false",
        f"trainer.default_local_dir={tmp_path}", "trainer.resume_mode=disable",
        "distillation.enabled=true", "distillation.nnodes=1", "distillation.n_gpus_per_node=1",
        f"distillation.teacher_models.teacher_model.model_path={tiny_chat_model}",
        "distillation.teacher_models.teacher_model.inference.name=hf",
        "distillation.teacher_models.teacher_model.inference.dtype=float32",
        "distillation.teacher_models.teacher_model.inference.tensor_model_parallel_size=1",
        f"distillation.distillation_loss.loss_mode={loss_mode}", "distillation.distillation_loss.topk=8",
        f"reward.custom_reward_function.path={SHAPED_REWARD}",
    ])
    rows = [json.loads(line) for line in open(tmp_path / "metrics.jsonl")]
    train = [r for r in rows if "distillation/loss" in r]
    assert [r["step"] for r in train] == list(range(1, STEPS + 1))
    for r in train:
        assert r["distillation/rows/default"] == 16.0  # every trajectory went to the teacher
        assert r["timing_s/teacher"] > 0
    divergence = [r["distillation/divergence"] for r in train]
    assert "actor/pg_loss" in train[0]  # use_task_rewards (the default): the task loss is there
    assert abs(divergence[0]) < 1e-6, divergence
    assert divergence[-1] > 1e-5, divergence
    if loss_mode == "forward_kl_topk":  # the teacher's top-8 hold most of its mass
        assert 0.0 < train[0]["distillation/teacher_mass"] <= 1.0
        assert train[0]["distillation/student_mass"] == pytest.approx(train[0]["distillation/teacher_mass"], abs=1e-5)


def test_self_distillation_example_through_main_ppo(ray_cluster, task_data, tiny_chat_model, tmp_path):
    """examples/distillation/self_distill_addition.py's ``opsd`` run, at test size: the teacher is the
    student's own start shown the answer (``privileged_context``, a system turn before the prompt). With the
    same weights, the step-1 divergence is > 0 only because the teacher's prompt holds the hint (the run
    above, without it, gives 0), and it goes through the example's own arguments and runner."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "distillation"))
    import self_distill_addition as example

    assets = {"student": tiny_chat_model, "train": task_data["train"], "test": task_data["test"]}
    args = example.run_args("opsd", assets, tmp_path, steps=2, workers=2, prompts=4, n=4, test_freq=2, lr=1e-2, seed=1)
    args += ["data.val_max_samples=8", "trainer.logger=[jsonl]"]
    result = example.run_main_ppo(args, tmp_path)
    assert [step for step, _ in result["val_curve"]] == [0, 2]  # before training and at the last step
    train = [r for r in map(json.loads, open(tmp_path / "metrics.jsonl")) if "distillation/loss" in r]
    assert [r["step"] for r in train] == [1, 2]
    assert all(r["distillation/rows/default"] == 16.0 for r in train)
    assert "actor/pg_loss" not in train[0]  # use_task_rewards=false: the distillation term alone
    assert train[0]["distillation/divergence"] > 1e-4, train[0]["distillation/divergence"]
