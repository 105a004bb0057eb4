"""Config loader and validation: defaults, overrides, unknown keys, messages in the user's terms, read-only."""

import sys
import types
import warnings

import pytest
from omegaconf import OmegaConf
from omegaconf.errors import ReadonlyConfigError
from verl.trainer.config import (
    DEFAULTS_YAML,
    ConfigError,
    config_to_yaml,
    load_config,
    resolve_device,
    schema_defaults,
    use_critic,
    validate_config,
    world_size,
)

REQUIRED = ["data.train_files=train.parquet", "actor_rollout_ref.model.path=/models/tiny"]


def _flat(d, prefix=""):
    out = {}
    for k, v in d.items():
        if isinstance(v, dict) and v:
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def test_packaged_yaml_equals_schema_defaults():
    from_schema = _flat(OmegaConf.to_container(schema_defaults(), resolve=False))
    from_yaml = _flat(OmegaConf.to_container(OmegaConf.load(DEFAULTS_YAML), resolve=False))
    assert sorted(from_yaml) == sorted(from_schema)
    diffs = {k: (from_yaml[k], from_schema[k]) for k in from_schema if from_yaml[k] != from_schema[k]}
    assert diffs == {}


def test_packaged_yaml_opens_with_the_command():
    first = DEFAULTS_YAML.read_text().splitlines()[:3]
    assert first[0].startswith("#")
    assert any("python -m verl.trainer.main_ppo" in line for line in first)


def test_overrides_types_lists_open_dicts_and_interpolations():
    cfg = load_config(
        REQUIRED
        + [
            "actor_rollout_ref.actor.optim.lr=1e-5",
            "trainer.logger=[console,jsonl]",
            "+reward.reward_kwargs.max_resp_len=64",
            "reward.reward_kwargs.extra.deep=x",  # inside an open dict the '+' is optional
            "+actor_rollout_ref.model.override_config.attention_dropout=0.0",
            "data.max_prompt_length=77",
            "actor_rollout_ref.actor.clip_ratio=0.3",
            "actor_rollout_ref.actor.clip_ratio_high=0.28",
        ]
    )
    assert cfg.actor_rollout_ref.actor.optim.lr == pytest.approx(1e-5)
    assert isinstance(cfg.actor_rollout_ref.actor.optim.lr, float)
    assert list(cfg.trainer.logger) == ["console", "jsonl"]
    assert cfg.reward.reward_kwargs == {"max_resp_len": 64, "extra": {"deep": "x"}}
    assert cfg.actor_rollout_ref.model.override_config.attention_dropout == 0.0
    # interpolated defaults follow what the user set, and are resolved at load time
    assert cfg.actor_rollout_ref.rollout.prompt_length == 77
    assert cfg.actor_rollout_ref.actor.clip_ratio_low == pytest.approx(0.3)
    assert cfg.actor_rollout_ref.actor.clip_ratio_high == pytest.approx(0.28)
    assert cfg.critic.model.path == "/models/tiny"
    assert cfg.critic.rollout_n == cfg.actor_rollout_ref.rollout.n


def test_config_file_is_merged_over_defaults_then_overrides(tmp_path):
    f = tmp_path / "run.yaml"
    f.write_text(
        "data:\n  train_batch_size: 32\n  max_response_length: 99\n"
        "reward:\n  reward_kwargs:\n    a: 1\n"
        "trainer:\n  logger: [console, tensorboard]\n"
    )
    cfg = load_config(["--config", str(f), "data.train_batch_size=16"] + REQUIRED)
    assert cfg.data.train_batch_size == 16  # command line wins over the file
    assert cfg.data.max_response_length == 99  # file wins over the defaults
    assert cfg.actor_rollout_ref.rollout.response_length == 99
    assert cfg.reward.reward_kwargs == {"a": 1}
    assert list(cfg.trainer.logger) == ["console", "tensorboard"]
    assert cfg.data.max_prompt_length == 512  # untouched default


def test_unknown_keys_are_all_reported_with_suggestions(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text("actor_rollout_ref:\n  actor:\n    ppo_mini_bsz: 4\ntrainer:\n  total_epoch: 3\n")
    with pytest.raises(ConfigError) as ei:
        load_config(
            [
                "--config",
                str(f),
                "actor.ppo_epochs=2",
                "data.train_batch_sise=8",
                "+data.brand_new=1",
                "data.train_batch_size=abc",
            ]
        )
    msg = str(ei.value)
    assert len(ei.value.problems) == 6
    assert "'actor_rollout_ref.actor.ppo_mini_bsz'" in msg and str(f) in msg
    assert "did you mean 'trainer.total_epochs'" in msg
    assert "did you mean 'actor_rollout_ref.actor.ppo_epochs'" in msg
    assert "did you mean 'data.train_batch_size'" in msg
    assert "unknown key 'data.brand_new'" in msg and "open dicts" in msg and "reward.reward_kwargs" in msg
    assert "data.train_batch_size='abc'" in msg and "Integer" in msg


def test_bad_argument_and_missing_config_file(tmp_path):
    with pytest.raises(ConfigError, match="unrecognised argument '--lr'"):
        load_config(["--lr", "3"])
    with pytest.raises(FileNotFoundError, match="nope.yaml"):
        load_config(["--config", str(tmp_path / "nope.yaml")])


def test_defaults_plus_required_keys_validate_and_become_read_only():
    cfg = load_config(REQUIRED)
    validate_config(cfg)
    assert OmegaConf.is_readonly(cfg)
    with pytest.raises(ReadonlyConfigError):
        cfg.data.train_batch_size = 3
    with pytest.raises(ReadonlyConfigError):
        cfg.actor_rollout_ref.actor.ppo_mini_batch_size = 1
    assert cfg.data.train_batch_size == 1024


def test_missing_required_keys_are_listed_together():
    with pytest.raises(ConfigError) as ei:
        validate_config(load_config([]))
    assert any("data.train_files is required" in p for p in ei.value.problems)
    assert any("actor_rollout_ref.model.path is required" in p for p in ei.value.problems)


def _problems(args):
    cfg = load_config(REQUIRED + args)
    with pytest.raises(ConfigError) as ei:
        validate_config(cfg)
    assert not OmegaConf.is_readonly(cfg)
    return ei.value.problems


def test_size_messages_in_prompts_trajectories_and_workers():
    problems = _problems(
        [
            "data.train_batch_size=6",
            "actor_rollout_ref.rollout.n=4",
            "trainer.n_gpus_per_node=2",
            "actor_rollout_ref.actor.ppo_mini_batch_size=6",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=5",
        ]
    )
    assert len(problems) == 1
    # 6 prompts x 4 = 24 trajectories / 2 workers = 12 per worker; 12 % 5 != 0
    assert "ppo_mini_batch_size=6 prompts x actor_rollout_ref.rollout.n=4 = 24 trajectories" in problems[0]
    assert "=2 workers = 12 trajectories per worker" in problems[0]
    assert "ppo_micro_batch_size_per_gpu=5" in problems[0]


def test_mini_batch_must_divide_world_size_and_fit_the_train_batch():
    problems = _problems(
        [
            "data.train_batch_size=10",
            "actor_rollout_ref.rollout.n=3",
            "trainer.nnodes=2",
            "trainer.n_gpus_per_node=2",
            "actor_rollout_ref.actor.ppo_mini_batch_size=3",
        ]
    )
    text = "\n".join(problems)
    # 10 prompts x 3 = 30 trajectories over 4 workers; 3 x 3 = 9 over 4 workers. Mini 3 not dividing 10
    # is fine (upstream: a shorter last mini-batch of 1 prompt)
    assert "30 trajectories is not divisible by trainer.nnodes*n_gpus_per_node=2*2=4 workers" in text
    assert "= 9 trajectories is not divisible by" in text
    assert len(problems) == 2
    # upstream's only rule: train_batch_size >= ppo_mini_batch_size
    problems = _problems(["data.train_batch_size=4", "actor_rollout_ref.actor.ppo_mini_batch_size=8"])
    assert any("ppo_mini_batch_size=8 prompts is larger than data.train_batch_size=4" in p for p in problems)
    # Megatron's pipeline schedule needs equal micro-batches: there the mini-batch must divide
    problems = _problems(
        [
            "data.train_batch_size=10",
            "actor_rollout_ref.actor.ppo_mini_batch_size=4",
            "actor_rollout_ref.actor.strategy=megatron",
        ]
    )
    assert any("ppo_mini_batch_size=4 prompts does not divide data.train_batch_size=10" in p for p in problems)


def test_valid_sizes_pass():
    cfg = load_config(
        REQUIRED
        + [
            "data.train_batch_size=6",
            "actor_rollout_ref.rollout.n=4",
            "trainer.n_gpus_per_node=2",
            "actor_rollout_ref.actor.ppo_mini_batch_size=3",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=3",  # 3*4/2 = 6 per worker
        ]
    )
    validate_config(cfg)
    assert world_size(cfg) == 2


def test_algorithm_checks_clip_critic_and_group_size():
    problems = _problems(
        [
            "actor_rollout_ref.actor.clip_ratio_low=1.2",
            "actor_rollout_ref.actor.clip_ratio_high=-0.1",
            "actor_rollout_ref.actor.clip_ratio_c=0.5",
            "actor_rollout_ref.rollout.n=1",
            "data.truncation=both",
            "trainer.logger=[console,tensorbord]",
        ]
    )
    text = "\n".join(problems)
    assert "clip_ratio_low=1.2 must be in (0, 1)" in text
    assert "clip_ratio_high=-0.1 must be > 0" in text
    assert "clip_ratio_c=0.5 must be > 1" in text
    assert "adv_estimator=grpo" in text and "rollout.n=1" in text
    assert "data.truncation='both' is not one of: error, left, right, middle" in text
    assert "'tensorbord'" in text


def test_critic_iff_gae():
    cfg = load_config(REQUIRED + ["algorithm.adv_estimator=gae"])
    assert use_critic(cfg)
    validate_config(cfg)
    assert not use_critic(load_config(REQUIRED))
    problems = _problems(["algorithm.adv_estimator=gae", "critic.enable=false"])
    assert "needs a value function" in problems[0]
    problems = _problems(["algorithm.adv_estimator=gae", "critic.ppo_micro_batch_size_per_gpu=7"])
    assert (
        problems[0].startswith("critic.ppo_mini_batch_size=256 prompts")
        and "not divisible by critic.ppo_micro" in problems[0]
    )


def test_double_kl_is_a_warning_not_an_error():
    cfg = load_config(
        REQUIRED + ["algorithm.use_kl_in_reward=true", "actor_rollout_ref.actor.use_kl_loss=true"]
    )
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        validate_config(cfg)
    assert any("applied twice" in str(x.message) for x in w)


def test_unknown_adv_estimator_is_reported_by_the_registry(monkeypatch):
    fake = types.ModuleType("verl.trainer.ppo.core_algos")

    def get_adv_estimator_fn(name):
        if name != "grpo":
            raise KeyError(f"unknown advantage estimator {name!r}; known: gae, grpo")
        return lambda: None

    fake.get_adv_estimator_fn = get_adv_estimator_fn
    fake.get_policy_loss_fn = lambda name: None
    monkeypatch.setitem(sys.modules, "verl.trainer.ppo.core_algos", fake)
    problems = _problems(["algorithm.adv_estimator=gpro"])
    assert problems == [
        "algorithm.adv_estimator='gpro': unknown advantage estimator 'gpro'; known: gae, grpo"
    ]


def test_resolve_device_never_writes_back(monkeypatch):
    import torch

    cfg = load_config(REQUIRED)
    validate_config(cfg)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device(cfg) == "cpu"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_device(cfg) == "cuda"
    assert cfg.trainer.device == "auto"
    assert resolve_device(load_config(REQUIRED + ["trainer.device=cpu"])) == "cpu"


def test_config_to_yaml_round_trips_through_config_flag(tmp_path):
    cfg = load_config(
        REQUIRED
        + [
            "data.train_batch_size=16",
            "actor_rollout_ref.actor.ppo_mini_batch_size=8",
            "trainer.n_gpus_per_node=2",
            "+reward.reward_kwargs.k=v",
            "trainer.logger=[jsonl]",
        ]
    )
    validate_config(cfg)
    path = tmp_path / "config.yaml"
    path.write_text(config_to_yaml(cfg))
    again = load_config(["--config", str(path)])
    assert OmegaConf.to_container(again) == OmegaConf.to_container(cfg)


def test_scalar_for_a_list_key_becomes_a_one_element_list():
    cfg = load_config(REQUIRED + ["trainer.logger=jsonl"])
    assert list(cfg.trainer.logger) == ["jsonl"]


def test_sections_pickle_read_only_for_workers():
    import pickle

    cfg = load_config(REQUIRED + ["actor_rollout_ref.actor.ppo_mini_batch_size=128"])
    validate_config(cfg)
    actor_rollout_ref = pickle.loads(pickle.dumps(cfg.actor_rollout_ref))
    assert actor_rollout_ref.actor.ppo_mini_batch_size == 128
    assert actor_rollout_ref.rollout.n == 5 and actor_rollout_ref.rollout.prompt_length == 512
    with pytest.raises(ReadonlyConfigError):
        actor_rollout_ref.actor.ppo_epochs = 2


def test_checkpoint_kl_controller_and_validation_sample_checks():
    problems = _problems(
        [
            "trainer.max_actor_ckpt_to_keep=0",
            "trainer.save_freq=5",
            "algorithm.use_kl_in_reward=true",
            "algorithm.kl_ctrl.type=adaptive",
            "algorithm.kl_ctrl.target_kl=0",
            "data.val_files=val.parquet",
            "actor_rollout_ref.rollout.val_kwargs.n=0",
            "trainer.resume_mode=resume_path",
        ]
    )
    text = "\n".join(problems)
    assert len(problems) == 4
    assert "trainer.max_actor_ckpt_to_keep=0 must be >= 1" in text
    assert "kl_ctrl.type=adaptive needs target_kl > 0" in text
    assert "val_kwargs.n=0 must be >= 1" in text
    assert "trainer.resume_mode=resume_path needs trainer.resume_from_path" in text


def test_use_rollout_log_probs_needs_the_rollout_to_compute_them():
    with pytest.raises(ConfigError) as ei:
        validate_config(load_config([*REQUIRED, "actor_rollout_ref.actor.use_rollout_log_probs=true"]))
    assert "rollout.calculate_log_probs=true" in str(ei.value)
    assert len(ei.value.problems) == 1
    ok = load_config(
        [*REQUIRED, "actor_rollout_ref.actor.use_rollout_log_probs=true",
         "actor_rollout_ref.rollout.calculate_log_probs=true"]
    )
    validate_config(ok)
    assert ok.actor_rollout_ref.rollout.name == "native"  # the default engine


def test_async_reward_cannot_feed_dynamic_sampling():
    with pytest.raises(ConfigError, match="launch_reward_fn_async=true scores while"):
        validate_config(load_config([*REQUIRED, "reward.launch_reward_fn_async=true",
                                     "algorithm.filter_groups.enable=true", "algorithm.filter_groups.metric=acc"]))
    validate_config(load_config([*REQUIRED, "reward.launch_reward_fn_async=true"]))


def test_offload_flags_are_rejected_before_workers_start_on_cpu():
    with pytest.raises(ConfigError) as ei:
        validate_config(load_config([*REQUIRED, "trainer.device=cpu",
                                     "actor_rollout_ref.actor.fsdp_config.param_offload=true",
                                     "actor_rollout_ref.actor.fsdp_config.optimizer_offload=true",
                                     "actor_rollout_ref.actor.use_kl_loss=true",
                                     "actor_rollout_ref.ref.fsdp_config.offload_policy=true"]))
    problems = ei.value.problems
    assert len(problems) == 2
    assert "actor_rollout_ref.actor.fsdp_config.param_offload/optimizer_offload=true means nothing on CPU" in problems[0]
    assert problems[1].startswith("actor_rollout_ref.ref.fsdp_config.offload_policy=true")


def test_local_worker_backend_takes_one_worker():
    with pytest.raises(ConfigError, match=r"worker_backend=local runs one worker .*n_gpus_per_node=1\*2=2"):
        validate_config(load_config([*REQUIRED, "trainer.worker_backend=local", "trainer.n_gpus_per_node=2",
                                     "actor_rollout_ref.rollout.n=2", "data.train_batch_size=8",
                                     "actor_rollout_ref.actor.ppo_mini_batch_size=8"]))
    with pytest.raises(ConfigError, match="trainer.worker_backend='thread' is not one of: ray, local"):
        validate_config(load_config([*REQUIRED, "trainer.worker_backend=thread"]))
    validate_config(load_config([*REQUIRED, "trainer.worker_backend=local", "trainer.n_gpus_per_node=1"]))


def test_dro_needs_a_positive_beta_before_workers_start():
    assert load_config(REQUIRED).actor_rollout_ref.actor.policy_loss.dro_beta is None  # upstream default
    for beta in ("null", "0", "-1.5"):
        problems = _problems(["actor_rollout_ref.actor.policy_loss.loss_mode=dro",
                              f"actor_rollout_ref.actor.policy_loss.dro_beta={beta}"])
        assert len(problems) == 1 and "loss_mode=dro needs policy_loss.dro_beta > 0" in problems[0], problems
    validate_config(load_config(REQUIRED + ["actor_rollout_ref.actor.policy_loss.loss_mode=dro",
                                            "actor_rollout_ref.actor.policy_loss.dro_beta=0.1"]))


def test_precision_keys_follow_model_dtype_and_are_checked():
    from verl.trainer.sft import load_sft_config, validate_sft_config

    cfg = load_config(["actor_rollout_ref.model.model_dtype=bfloat16", "critic.model.fsdp_config.model_dtype=bf16",
                       "actor_rollout_ref.ref.fsdp_config.mixed_precision.param_dtype=fp32"])
    arr = cfg.actor_rollout_ref
    assert arr.actor.fsdp_config.model_dtype == "bfloat16"  # the older model-level key is the default
    assert arr.actor.fsdp_config.mixed_precision == {"param_dtype": "bfloat16", "reduce_dtype": "fp32",
                                                     "buffer_dtype": "fp32"}
    assert arr.ref.fsdp_config.mixed_precision.param_dtype == "fp32"
    assert cfg.critic.model.fsdp_config.mixed_precision.param_dtype == "bf16"
    assert cfg.data.seed == cfg.trainer.seed == 1 and arr.rollout.seed == 42
    assert load_config(["trainer.seed=7"]).data.seed == 7  # trainer.seed orders the data unless data.seed is set

    bad = load_config(REQUIRED + ["actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=fp16",
                                   "actor_rollout_ref.ref.fsdp_config.mixed_precision.param_dtype=fp16",
                                   "actor_rollout_ref.actor.fsdp_config.mixed_precision.reduce_dtype=half"])
    with pytest.raises(ConfigError) as err:
        validate_config(bad)
    text = str(err.value)
    assert "actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=fp16 trains in fp16" in text
    assert "actor_rollout_ref.actor.fsdp_config.mixed_precision.reduce_dtype='half' is not one of" in text
    assert "ref.fsdp_config.mixed_precision.param_dtype=fp16" not in text  # inference in fp16 is fine
    sft = load_sft_config(["data.train_files=x.parquet", "model.path=m", "model.model_dtype=float16"])
    assert sft.model.fsdp_config.mixed_precision.param_dtype == "float16"
    with pytest.raises(ConfigError, match="model.fsdp_config.mixed_precision.param_dtype=float16 trains in fp16"):
        validate_sft_config(sft)


def test_param_dtype_auto_is_a_compute_dtype_only():
    """``param_dtype=auto`` (bf16 compute where the hardware has native bf16 units) is accepted for every
    FSDP section; with fp16 weights of a trained model it would train in fp16 and is refused; ``auto`` is
    no storage dtype."""
    auto = "fsdp_config.mixed_precision.param_dtype=auto"
    validate_config(load_config(REQUIRED + [f"actor_rollout_ref.actor.{auto}"]))
    fp16 = load_config(REQUIRED + [f"actor_rollout_ref.actor.{auto}",
                                   "actor_rollout_ref.actor.fsdp_config.model_dtype=fp16"])
    with pytest.raises(ConfigError, match=r"actor_rollout_ref.actor.fsdp_config.model_dtype=fp16 with "
                                          r"mixed_precision.param_dtype=auto trains in fp16"):
        validate_config(fp16)
    refused = load_config(REQUIRED + ["actor_rollout_ref.actor.fsdp_config.model_dtype=auto"])
    with pytest.raises(ConfigError, match=r"actor_rollout_ref.actor.fsdp_config.model_dtype='auto' is not one of"):
        validate_config(refused)
