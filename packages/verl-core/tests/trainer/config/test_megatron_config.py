"""The megatron config sections: upstream key names and defaults, the reference following the actor,
data-parallel sizes in the batch checks, and the errors raised before any worker starts."""

import pytest
from verl.trainer.config import ConfigError, load_config, validate_config

REQUIRED = ["data.train_files=train.parquet", "actor_rollout_ref.model.path=/models/tiny", "trainer.device=cpu"]
MEGATRON = ["actor_rollout_ref.actor.strategy=megatron", "trainer.n_gpus_per_node=4", "data.train_batch_size=8",
            "actor_rollout_ref.rollout.n=2", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2"]


def _problems(overrides):
    with pytest.raises(ConfigError) as ei:
        validate_config(load_config(REQUIRED + overrides))
    return ei.value.problems


def test_upstream_keys_and_defaults_and_ref_follows_actor():
    cfg = load_config(REQUIRED + ["actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2",
                                  "actor_rollout_ref.actor.megatron.seed=7"])
    actor, ref, critic = cfg.actor_rollout_ref.actor.megatron, cfg.actor_rollout_ref.ref.megatron, cfg.critic.megatron
    assert (actor.pipeline_model_parallel_size, actor.virtual_pipeline_model_parallel_size,
            actor.context_parallel_size, actor.expert_model_parallel_size) == (1, None, 1, 1)
    assert actor.sequence_parallel is True and actor.use_distributed_optimizer is True
    assert (actor.param_offload, actor.grad_offload, actor.optimizer_offload) == (False, False, False)
    assert (ref.tensor_model_parallel_size, ref.seed) == (2, 7)  # interpolated from the actor's
    assert critic.tensor_model_parallel_size == 1 and critic.seed == 42  # upstream: the critic's own
    assert cfg.actor_rollout_ref.ref.strategy == "fsdp2"


def test_megatron_sizes_divide_workers_and_minibatches_use_the_data_parallel_size():
    ok = load_config(REQUIRED + MEGATRON + ["actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2"])
    validate_config(ok)  # 4 prompts x 2 = 8 trajectories / (4 workers / tp 2 = 2 dp ranks) = 4 per rank, micro 2
    problems = _problems(MEGATRON + ["actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2",
                                     "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=3"])
    assert len(problems) == 1
    assert "4 workers / (actor_rollout_ref.actor.megatron tensor x pipeline x context parallel 2) = 2 data-parallel ranks" in problems[0]
    assert "= 4 trajectories per worker, not divisible by actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=3" in problems[0]
    problems = _problems(MEGATRON + ["actor_rollout_ref.actor.megatron.tensor_model_parallel_size=3"])
    assert any("tensor_model_parallel_size=3 x pipeline_model_parallel_size=1 x context_parallel_size=1 = 3 does not "
               "divide the 4 workers" in p for p in problems)


def test_colocated_megatron_roles_share_one_layout():
    problems = _problems(MEGATRON + ["actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2",
                                     "algorithm.adv_estimator=gae", "critic.ppo_micro_batch_size_per_gpu=2"])
    assert len(problems) == 1 and problems[0].startswith("critic.megatron {'tensor_model_parallel_size': 1")
    assert "set critic.megatron.<size> to the actor's" in problems[0]
    problems = _problems(MEGATRON + ["actor_rollout_ref.ref.megatron.pipeline_model_parallel_size=2"])
    assert any(p.startswith("actor_rollout_ref.ref.megatron") and "differs from the actor's" in p for p in problems)
    problems = _problems(MEGATRON + ["actor_rollout_ref.ref.strategy=fsdp2"])
    assert any("the reference lives in the actor's worker, so both must be megatron or neither" in p for p in problems)


def test_what_the_megatron_engine_does_not_do_is_refused_up_front():
    problems = _problems(MEGATRON + [
        "actor_rollout_ref.actor.megatron.context_parallel_size=2",
        "actor_rollout_ref.actor.megatron.param_offload=true",
        "actor_rollout_ref.actor.megatron.grad_offload=true",
        "actor_rollout_ref.model.use_remove_padding=true",
    ])
    text = "\n".join(problems)
    assert "context and expert parallelism need Transformer Engine attention" in text
    assert "actor_rollout_ref.actor.megatron.param_offload/grad_offload=true means nothing on CPU" in text
    assert "actor_rollout_ref.model.use_remove_padding=true packs sequences in Megatron's THD layout" in text
