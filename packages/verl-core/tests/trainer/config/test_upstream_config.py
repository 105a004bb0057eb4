"""Upstream verl's command-line forms and key tree: Hydra's +/++/~ and --config-path/--config-name, aliases,
and keys accepted only at upstream's default (refused at validation, naming why)."""

import importlib.util

import pytest
from omegaconf import OmegaConf
from verl.trainer.config import (
    ConfigError,
    PPOTrainerConfig,
    config_to_yaml,
    load_config,
    upstream,
    validate_config,
)
from verl.trainer.config.loader import _is_ours

# A config that validates on this CPU machine: 1 worker, batch 8 x n=2, micro-batches of 4.
VALID = [
    "data.train_files=train.parquet",
    "actor_rollout_ref.model.path=/models/tiny",
    "trainer.nnodes=1",
    "trainer.n_gpus_per_node=1",
    "trainer.device=cpu",
    "data.train_batch_size=8",
    "actor_rollout_ref.rollout.n=2",
    "actor_rollout_ref.actor.ppo_mini_batch_size=8",
]


def _problems(argv):
    with pytest.raises(ConfigError) as ei:
        validate_config(load_config(argv))
    return ei.value.problems


def test_plus_adds_only_new_keys_double_plus_adds_or_overrides_tilde_deletes():
    cfg = load_config(
        [
            *VALID,
            "+reward.reward_kwargs.max_resp_len=64",
            "++reward.reward_kwargs.other=1",
            "++data.max_prompt_length=77",
            "+actor_rollout_ref.model.override_config.attention_dropout=0.1",
            "~actor_rollout_ref.model.override_config.attention_dropout",
            "data.max_response_length=99",
            "~data.max_response_length",
            "~reward.sandbox.memory_mb=1024",
        ]
    )
    assert dict(cfg.reward.reward_kwargs) == {"max_resp_len": 64, "other": 1}
    assert cfg.data.max_prompt_length == 77
    assert "attention_dropout" not in cfg.actor_rollout_ref.model.override_config
    assert cfg.data.max_response_length == 512  # a typed key goes back to its default
    assert "memory_mb" not in cfg.reward.sandbox  # an open dict's entry is removed


def test_wrong_forms_are_refused_as_hydra_does():
    with pytest.raises(ConfigError) as ei:
        load_config(
            [
                "+data.max_prompt_length=4",  # exists: + cannot append
                "~data.nope",  # nothing to delete
                "~data.max_prompt_length=3",  # the value is 512, not 3
                "++data.brand_new=1",  # typed section: cannot add
                "actor_rollout_ref.model.override_config.x",  # no '='
            ]
        )
    msg = str(ei.value)
    assert len(ei.value.problems) == 5
    assert "an item is already at 'data.max_prompt_length'" in msg and "++data.max_prompt_length=4" in msg
    assert "'data.nope' does not exist" in msg
    assert "the value of 'data.max_prompt_length' is 512 and not 3" in msg
    assert "unknown key 'data.brand_new'" in msg
    assert "'actor_rollout_ref.model.override_config.x': missing EQUAL" in msg and "expected key=value" in msg


def test_config_name_with_a_users_yaml_whose_defaults_name_ppo_trainer(tmp_path):
    (tmp_path / "common.yaml").write_text("trainer:\n  total_epochs: 3\n  project_name: from_common\n")
    (tmp_path / "my_grpo.yaml").write_text(
        "hydra:\n  searchpath:\n    - file://verl/trainer/config\n"
        "defaults:\n  - ppo_trainer\n  - common\n  - _self_\n"
        "trainer:\n  project_name: mine\n"
        "actor_rollout_ref:\n  actor:\n    _target_: verl.workers.config.FSDPActorConfig\n    ppo_epochs: 2\n"
        "reward:\n  reward_manager:\n    name: dapo\n"
        "custom_reward_function:\n  path: /tmp/score.py\n  name: my_score\n"
        "reward_model:\n  enable: null\n"
    )
    cfg = load_config([f"--config-path={tmp_path}", "--config-name=my_grpo", "trainer.total_epochs=5"])
    assert cfg.trainer.project_name == "mine"  # _self_ wins over the defaults it lists
    assert cfg.trainer.total_epochs == 5  # the command line wins over the files
    assert cfg.actor_rollout_ref.actor.ppo_epochs == 2
    assert cfg.reward.reward_manager == "dapo"  # upstream's reward.reward_manager.name
    assert cfg.reward.custom_reward_function.path == "/tmp/score.py"
    assert cfg.reward.custom_reward_function.name == "my_score"
    assert cfg.reward.reward_model.enable is False  # upstream's legacy null means "not set"

    (tmp_path / "bad.yaml").write_text(
        "defaults:\n  - actor@actor_rollout_ref.actor: dp_actor\n  - missing\n"
    )
    with pytest.raises(ConfigError) as ei:
        load_config(["--config-path", str(tmp_path), "--config-name", "bad"])
    assert "defaults entry {'actor@actor_rollout_ref.actor': 'dp_actor'}" in str(ei.value)
    assert "--config-name=missing" in str(ei.value)


def test_ppo_megatron_trainer_without_a_file_is_upstreams_megatron_config():
    cfg = load_config(
        [
            "--config-path=config",
            "--config-name='ppo_megatron_trainer.yaml'",
            "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2",
            "actor_rollout_ref.actor.megatron.use_mbridge=True",  # upstream's megatron-only key at its default
        ]
    )
    assert cfg.actor_rollout_ref.actor.strategy == "megatron" and cfg.critic.strategy == "megatron"
    assert cfg.actor_rollout_ref.ref.strategy == "megatron"
    assert cfg.actor_rollout_ref.ref.megatron.tensor_model_parallel_size == 2
    assert "optimizer" not in cfg.actor_rollout_ref.actor.optim  # upstream-only keys never enter the config
    # upstream's default differs by tree: adam in the megatron one, AdamW in ppo_trainer
    load_config(["--config-name=ppo_megatron_trainer", "actor_rollout_ref.actor.optim.optimizer=adam"])
    load_config(["actor_rollout_ref.actor.optim.optimizer=AdamW"])
    with pytest.raises(ConfigError, match="optim.optimizer=adam .*accepted only at its default, 'AdamW'"):
        load_config(["actor_rollout_ref.actor.optim.optimizer=adam"])


def test_every_upstream_key_is_ours_an_alias_or_refused_with_a_specific_reason():
    for name in upstream.CONFIG_NAMES:
        for key in upstream.upstream_defaults()[name]:
            if key in upstream.ALIASES:
                assert _is_ours(PPOTrainerConfig, upstream.ALIASES[key]), key
            elif not _is_ours(PPOTrainerConfig, key):
                assert upstream.refusal(key) != upstream.REFUSED[-1][1], f"{key}: only the generic reason"


def test_upstream_keys_accepted_at_default_refused_otherwise_with_the_reason():
    validate_config(
        load_config(
            [
                *VALID,
                "actor_rollout_ref.rollout.cudagraph_capture_sizes=null",
                "actor_rollout_ref.actor.rollout_n=2",  # mirrors rollout.n (2 here): accepted
                "actor_rollout_ref.actor.profiler.enable=False",
                "actor_rollout_ref.actor.fsdp_config.use_torch_compile=true",
            ]
        )
    )
    problems = _problems(
        [
            *VALID,
            "actor_rollout_ref.rollout.cudagraph_capture_sizes=[1,2]",
            "actor_rollout_ref.actor.rollout_n=8",
            "++global_profiler.tool=nsys",
            "actor_rollout_ref.model.lora_rank=8",  # implemented (LoRA): not a problem
        ]
    )
    text = "\n".join(problems)
    assert len(problems) == 3, text
    assert "cudagraph_capture_sizes=[1,2] (on the command line): this rollout-engine option" in text
    assert "engine_kwargs.<vllm|sglang>" in text
    assert "actor_rollout_ref.actor.rollout_n=8 (on the command line): mirrors actor_rollout_ref.rollout.n" in text
    assert "++global_profiler.tool=nsys" in text and "(accepted only at its default, None)" in text


def test_schema_keys_refused_unless_default_say_why():
    problems = _problems([*VALID, "actor_rollout_ref.actor.fsdp_config.forward_prefetch=true"])
    assert problems == [
        "actor_rollout_ref.actor.fsdp_config.forward_prefetch=True: FSDP forward prefetch is not wired into the "
        "engines (accepted only at its default, False)"
    ]
    # implemented keys are accepted at any value: torch.compile of the actor and its decode step
    validate_config(load_config([*VALID, "actor_rollout_ref.actor.use_torch_compile=true"]))


@pytest.mark.parametrize("engine", ["native", "hf"])
@pytest.mark.parametrize(
    "arg", ["actor_rollout_ref.rollout.tensor_model_parallel_size=2", "actor_rollout_ref.rollout.dtype=float32",
            "actor_rollout_ref.rollout.mode=async", "actor_rollout_ref.rollout.gpu_memory_utilization=0.9"],
)
def test_served_engine_options_are_refused_by_name_for_engines_that_do_not_read_them(engine, arg):
    key = arg.split("=")[0]
    problems = _problems([*VALID, f"actor_rollout_ref.rollout.name={engine}", arg])
    assert len(problems) == 1 and problems[0].startswith(key + "=")
    assert f"the {engine} rollout does not read it" in problems[0], problems
    validate_config(load_config([*VALID, f"actor_rollout_ref.rollout.name={engine}"]))  # defaults pass
    # vllm reads them: its only problem here is that vllm is not installed (or none when it is)
    vllm = [*VALID, "actor_rollout_ref.rollout.name=vllm", arg]
    if importlib.util.find_spec("vllm") is None:
        assert all("which is not installed" in p for p in _problems(vllm))


def test_aliases_from_the_command_line():
    cfg = load_config(
        [
            *VALID,
            "reward_model.reward_manager=prime",
            "actor_rollout_ref.actor.optim.clip_grad=0.5",
            "actor_rollout_ref.actor.optim.warmup_style=cosine",
            "reward.reward_model.model_path=/rm",
            "reward.reward_manager.source=register",  # upstream's default under our plain-value key: dropped
        ]
    )
    assert cfg.reward.reward_manager == "prime"
    assert cfg.actor_rollout_ref.actor.grad_clip == 0.5
    assert cfg.actor_rollout_ref.actor.optim.lr_scheduler_type == "cosine"
    assert cfg.reward.reward_model.model.path == "/rm"
    with pytest.raises(
        ConfigError, match=r"reward.reward_manager.source=importlib \(on the command line\): custom reward-manager"
    ):
        load_config([*VALID, "reward.reward_manager.source=importlib"])


@pytest.mark.skipif(importlib.util.find_spec("sglang") is not None, reason="sglang is installed here")
def test_an_engine_that_is_not_installed_is_refused_with_its_install_line():
    problems = _problems([*VALID, "actor_rollout_ref.rollout.name=sglang"])
    assert any(
        "rollout.name=sglang needs sglang" in p and "pip install 'verl-workers[sglang]'" in p
        for p in problems
    )
    problems = _problems([*VALID, "actor_rollout_ref.rollout.name=trtllm"])
    assert any("rollout.name='trtllm' is not a rollout engine" in p for p in problems)


def test_recorded_config_reloads_and_validates(tmp_path):
    cfg = load_config([*VALID, "actor_rollout_ref.actor.rollout_n=2"])
    path = tmp_path / "config.yaml"
    path.write_text(OmegaConf.to_yaml(cfg, resolve=True))  # with upstream's keys at their defaults
    again = load_config(["--config", str(path)])
    validate_config(again)
    text = config_to_yaml(cfg)
    assert "profiler" not in text and "rollout_n: 2" in text and "train_batch_size: 8" in text
    path.write_text(text)
    assert OmegaConf.to_container(load_config(["--config", str(path)])) == OmegaConf.to_container(cfg)
