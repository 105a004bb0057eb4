"""The ``distillation`` section: upstream's keys and defaults load, an enabled section is validated in the
user's terms, teachers are resolved (pool sizes, routing keys, privileged context)."""

import pytest
from verl.trainer.config import ConfigError, load_config, validate_config
from verl.trainer.config.distillation import resolve_teachers
from verl.trainer.distillation.teacher_pool import TeacherRole, teacher_resource_pools

REQUIRED = ["data.train_files=train.parquet", "actor_rollout_ref.model.path=/models/student", "trainer.device=cpu",
            "trainer.n_gpus_per_node=1", "data.train_batch_size=8", "actor_rollout_ref.actor.ppo_mini_batch_size=8"]
ON = ["distillation.enabled=true", "distillation.nnodes=1", "distillation.n_gpus_per_node=2",
      "distillation.teacher_models.teacher_model.model_path=/models/teacher",
      "distillation.teacher_models.teacher_model.inference.name=hf",
      "distillation.teacher_models.teacher_model.inference.tensor_model_parallel_size=1"]


def _problems(args):
    with pytest.raises(ConfigError) as ei:
        validate_config(load_config(REQUIRED + args))
    return ei.value.problems


def test_upstream_defaults_load_and_validate_when_off():
    cfg = load_config(REQUIRED)
    d = cfg.distillation
    assert (d.enabled, d.nnodes, d.n_gpus_per_node, d.teacher_key) == (False, 0, 8, "data_source")
    loss = d.distillation_loss
    assert (loss.loss_mode, loss.topk, loss.use_task_rewards, loss.use_policy_gradient) == ("k3", 32, True, False)
    assert (loss.loss_max_clamp, loss.log_prob_min_clamp, loss.distillation_loss_coef) == (None, None, 1.0)
    t = d.teacher_models.teacher_model
    # upstream's mirrors of the student's rollout, resolved at load
    assert t.inference.name == cfg.actor_rollout_ref.rollout.name
    assert t.inference.temperature == cfg.actor_rollout_ref.rollout.temperature
    assert t.inference.tensor_model_parallel_size == 2 and t.num_replicas == 0
    validate_config(cfg)
    assert teacher_resource_pools(cfg) == ({}, {})


def test_one_teacher_takes_the_whole_pool():
    cfg = load_config(REQUIRED + ON)
    validate_config(cfg)
    (name, t), = resolve_teachers(cfg).items()
    assert name == "teacher_model" and t.num_replicas == 2 and t.world_size == 2
    assert teacher_resource_pools(cfg) == ({"teacher_pool_teacher_model": [2]},
                                           {TeacherRole("teacher_model"): "teacher_pool_teacher_model"})


def test_enabled_section_problems_in_the_users_terms():
    problems = _problems(["distillation.enabled=true"])
    text = "\n".join(problems)
    assert "distillation.nnodes=0" in text and "at least one worker" in text
    assert "teacher_model.model_path is required" in text
    assert len(problems) == 2, problems  # the teacher's engine follows rollout.name (native): accepted

    problems = _problems(ON + ["distillation.teacher_models.teacher_model.inference.name=vllm"])
    assert any("inference.name='vllm'" in p and "not implemented" in p for p in problems), problems
    problems = _problems(ON + ["distillation.distillation_loss.loss_mode=k1"])
    assert any("k1's gradient does not depend on the teacher" in p for p in problems), problems
    problems = _problems(ON + ["distillation.distillation_loss.loss_mode=forward_kl"])
    assert any("loss_mode='forward_kl'" in p and "forward_kl_topk" in p for p in problems), problems
    problems = _problems(ON + ["distillation.teacher_models.teacher_model.inference.gpu_memory_utilization=0.9"])
    assert any("gpu_memory_utilization=0.9: a vLLM/SGLang engine setting" in p for p in problems), problems
    problems = _problems(ON + ["distillation.distillation_loss.lmbda=0.5",
                               "distillation.distillation_loss.use_policy_gradient=true"])
    assert any("lmbda=0.5" in p and "needs on-policy samples" in p for p in problems), problems
    # the rollout's per-token log-probs would not match the rows replaced by answers (found at step 1 before)
    problems = _problems(ON + ["distillation.distillation_loss.lmbda=0.5",
                               "actor_rollout_ref.rollout.calculate_log_probs=true"])
    assert any("lmbda=0.5" in p and "rollout.calculate_log_probs=false" in p for p in problems), problems
    problems = _problems(ON + ["distillation.distillation_loss.loss_mode=jsd_topk",
                               "distillation.distillation_loss.jsd_beta=1.5"])
    assert problems == ["distillation.distillation_loss.jsd_beta=1.5 must be in [0, 1]"]
    problems = _problems(ON + ["distillation.teacher_models.teacher_model.inference.prompt_length=7"])
    assert any("prompt_length=7" in p and "rollout.prompt_length" in p for p in problems), problems


def test_a_typo_inside_a_teacher_entry_is_named_with_a_suggestion():
    problems = _problems(ON + ["+distillation.teacher_models.teacher_model.model_paht=/x"])
    assert problems == ["unknown key distillation.teacher_models.teacher_model.model_paht; did you mean "
                        "distillation.teacher_models.teacher_model.model_path?"]
    problems = _problems(ON + ["+distillation.teacher_models.teacher_model.inference.topk=3"])
    assert len(problems) == 1 and "unknown key distillation.teacher_models.teacher_model.inference.topk" in problems[0]


SEVERAL = ["distillation.enabled=true", "distillation.nnodes=1", "distillation.n_gpus_per_node=3",
           "+distillation.teacher_models.math.key=arithmetic", "+distillation.teacher_models.math.model_path=/m",
           "+distillation.teacher_models.math.num_replicas=2",
           "+distillation.teacher_models.math.inference.tensor_model_parallel_size=1",
           "+distillation.teacher_models.math.inference.name=hf",
           "+distillation.teacher_models.code.key=code", "+distillation.teacher_models.code.model_path=/c",
           "+distillation.teacher_models.code.num_replicas=1",
           "+distillation.teacher_models.code.inference.tensor_model_parallel_size=1",
           "+distillation.teacher_models.code.inference.name=hf"]


def test_several_teachers_fill_the_pool_and_the_placeholder_entry_is_dropped():
    cfg = load_config(REQUIRED + SEVERAL)
    validate_config(cfg)
    teachers = resolve_teachers(cfg)
    assert sorted(teachers) == ["code", "math"]  # the default teacher_model entry has no model_path: dropped
    assert (teachers["math"].key, teachers["math"].world_size, teachers["code"].world_size) == ("arithmetic", 2, 1)
    assert teacher_resource_pools(cfg)[0] == {"teacher_pool_math": [2], "teacher_pool_code": [1]}
    # the added entries get the mirrors' values like the default entry
    assert teachers["code"].inference.temperature == cfg.actor_rollout_ref.rollout.temperature

    problems = _problems([p.replace("n_gpus_per_node=3", "n_gpus_per_node=4") for p in SEVERAL])
    assert any("the teachers need 3 workers (math: 2 x 1, code: 1 x 1" in p and "pool has" in p and "= 4" in p
               for p in problems), problems
    problems = _problems([p.replace("code.key=code", "code.key=arithmetic") for p in SEVERAL])
    assert any("code.key='arithmetic' is also math's key" in p for p in problems), problems
    # the default entry set as well: a teacher like the others, not dropped
    problems = _problems(SEVERAL + ["distillation.teacher_models.teacher_model.model_path=/t"])
    assert any("teacher_model.key is required with several teachers" in p for p in problems), problems


def test_local_backend_and_megatron_are_refused_with_distillation():
    problems = _problems(ON + ["trainer.worker_backend=local"])
    assert any("teacher pool has 2 workers" in p for p in problems), problems
    problems = _problems(ON + ["actor_rollout_ref.actor.strategy=megatron"])
    assert any("actor_rollout_ref.actor.strategy=megatron" in p and "distillation" in p for p in problems)


def test_a_teacher_larger_than_a_node_takes_whole_nodes():
    cfg = load_config(REQUIRED + [a.replace("nnodes=1", "nnodes=2") for a in ON])
    validate_config(cfg)
    assert teacher_resource_pools(cfg)[0] == {"teacher_pool_teacher_model": [2, 2]}  # 4 workers on 2 nodes of 2
