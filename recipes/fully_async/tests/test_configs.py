"""The recipe's configs load and validate; the recipe's own checks name the bad key and what is valid."""

import pytest
from verl.trainer.config import ConfigError
from verl_recipe_fully_async.config import (
    async_problems,
    load_async_config,
    samples_per_version,
    total_training_steps,
    validate_async_config,
)
from verl_recipe_fully_async.main import CPU_CONFIG, ONE_STEP_OFF, ONE_STEP_OFF_CONFIG, PAPER_CONFIG, RECIPE

DATA = ["data.train_files=x.parquet", "actor_rollout_ref.model.path=m"]


def _load(*files, overrides=()):
    argv = [a for f in files for a in ("--config", str(RECIPE.configs_dir / f))]
    return load_async_config([*argv, *overrides])


def test_paper_config_holds_upstreams_setting_and_validates_on_cpu():
    c = _load(PAPER_CONFIG)
    at = c.async_training
    assert (c.rollout.nnodes, c.rollout.n_gpus_per_node, c.trainer.nnodes, c.trainer.n_gpus_per_node) == (
        8,
        8,
        8,
        8,
    )
    assert (
        at.staleness_threshold,
        at.trigger_parameter_sync_step,
        at.require_batches,
        at.partial_rollout,
    ) == (0.5, 4, 4, True)
    assert (c.actor_rollout_ref.rollout.n, c.actor_rollout_ref.actor.ppo_mini_batch_size) == (16, 32)
    assert samples_per_version(c) == 512 and c.rollout.total_rollout_steps == 512 * 400
    assert total_training_steps(c) == 1600  # trainer steps of 128 prompts: 400 upstream steps of 512
    assert async_problems(c) == []
    # with the GPU the only missing piece, the whole config validates (sizes divide over 64 + 64 workers)
    validate_async_config(_load(PAPER_CONFIG, overrides=["trainer.device=cpu"]))


def test_cpu_defaults_validate():
    for files in ((CPU_CONFIG,), (CPU_CONFIG, ONE_STEP_OFF_CONFIG)):
        c = _load(*files, overrides=DATA)
        validate_async_config(c)
    assert (c.async_training.staleness_threshold, c.async_training.trigger_parameter_sync_step) == (1.0, 1)
    assert c.data.gen_batch_size == c.data.train_batch_size and not c.async_training.partial_rollout
    # upstream's one-step-off recomputes the old log-probs on the trainer; the rollout's stay an option
    assert c.actor_rollout_ref.actor.use_rollout_log_probs is False
    assert _load(CPU_CONFIG, overrides=DATA).actor_rollout_ref.actor.use_rollout_log_probs is True  # fully async
    opt = _load(CPU_CONFIG, ONE_STEP_OFF_CONFIG, overrides=[*DATA, "actor_rollout_ref.actor.use_rollout_log_probs=true"])
    validate_async_config(opt)
    argv = ONE_STEP_OFF.with_default_config([])
    assert argv == [
        "--config",
        str(RECIPE.configs_dir / CPU_CONFIG),
        "--config",
        str(RECIPE.configs_dir / ONE_STEP_OFF_CONFIG),
    ]


@pytest.mark.parametrize(
    "override,needle",
    [
        (
            "actor_rollout_ref.hybrid_engine=true",
            "hybrid_engine=true: this recipe runs the rollout on a pool of its own",
        ),
        (
            "data.train_batch_size=32",
            "must equal async_training.require_batches x actor.ppo_mini_batch_size = 1 x 16",
        ),
        ("async_training.staleness_threshold=1.5", "staleness_threshold=1.5 must be in [0, 1]"),
        ("actor_rollout_ref.rollout.name=sglang", "rollout.name=sglang: this recipe runs native, hf, vllm"),
        ("actor_rollout_ref.rollout.name=vllm", "rollout.mode=sync: the rollouter streams prompts to vLLM"),
        (
            "async_training.weight_sync=object_store async_training.overlap_weight_sync=true",
            "overlap_weight_sync=true overlaps the collective broadcast",
        ),
        (
            "actor_rollout_ref.rollout.name=hf",
            "partial_rollout=true pauses generations mid-way, which the hf engine",
        ),
        ("async_training.weight_sync=nccl", "weight_sync='nccl' is not one of: collective, object_store"),
        (
            "trainer.save_freq=3",
            "save_freq=3 must be a multiple of async_training.trigger_parameter_sync_step=2",
        ),
        (
            "rollout.n_gpus_per_node=3",
            "data.train_batch_size=16 prompts is not divisible by the 3 rollout workers",
        ),
        ("rollout.total_rollout_steps=40", "total_rollout_steps=40 prompts must be a positive multiple of"),
        ("algorithm.filter_groups.enable=true", "filter_groups.enable=true is not supported by this recipe"),
        ("trainer.worker_backend=local", "worker_backend=local: two resource pools need Ray"),
        (
            "distillation.enabled=true distillation.nnodes=1 distillation.n_gpus_per_node=1 "
            "distillation.teacher_models.teacher_model.model_path=/models/teacher",
            "distillation.enabled=true: this recipe starts its own worker pools",
        ),
    ],
)
def test_bad_settings_are_refused_naming_the_key(override, needle):
    c = _load(CPU_CONFIG, overrides=[*DATA, *override.split()])
    with pytest.raises(ConfigError) as e:
        validate_async_config(c)
    assert any(needle in p for p in e.value.problems), e.value.problems


def test_vllm_streams_with_partial_rollouts_and_the_trainer_pool_validates_natively():
    from verl_recipe_fully_async.config import trainer_pool_actor_config

    vllm = ["actor_rollout_ref.rollout.name=vllm", "actor_rollout_ref.rollout.mode=async"]
    c = _load(CPU_CONFIG, overrides=[*DATA, *vllm, "async_training.overlap_weight_sync=true"])
    assert async_problems(c) == []  # (core's own check wants vLLM installed: envs/vllm-cpu)
    assert c.async_training.partial_rollout
    trainer_side = trainer_pool_actor_config(c)
    assert trainer_side.rollout.name == "native" and c.actor_rollout_ref.rollout.name == "vllm"
    assert trainer_side.actor == c.actor_rollout_ref.actor
    native = _load(CPU_CONFIG, overrides=DATA)
    assert trainer_pool_actor_config(native) is native.actor_rollout_ref


def test_total_rollout_steps_decides_the_trainer_steps_and_must_agree():
    c = _load(
        CPU_CONFIG, overrides=[*DATA, "rollout.total_rollout_steps=320", "trainer.total_training_steps=null"]
    )
    validate_async_config(c)
    assert total_training_steps(c) == 20
    c = _load(CPU_CONFIG, overrides=[*DATA, "rollout.total_rollout_steps=320"])  # the config's 60 steps too
    assert any("set only one of them" in p for p in async_problems(c))


def test_unknown_upstream_key_gets_a_did_you_mean():
    with pytest.raises(ConfigError, match="did you mean 'async_training.staleness_threshold'"):
        _load(CPU_CONFIG, overrides=["async_training.staleness_treshold=0.2"])
