"""The recipe's two configs and PRIME's config checks: upstream's numbers, what is derived, what is refused."""

import importlib.util

import pytest
from verl.trainer.config import ConfigError
from verl_recipe_prime.config import (
    derived_gen_batch_size,
    load_prime_config,
    prm_world_size,
    validate_prime_config,
)
from verl_recipe_prime.main_prime import CPU_CONFIG, PAPER_CONFIG, RECIPE

FILES = ["data.train_files=/data/train.parquet", "actor_rollout_ref.model.path=/models/sft"]


def _paper(*overrides):
    return RECIPE.load_file(PAPER_CONFIG, overrides=overrides)


def _cpu(*overrides):
    return load_prime_config(RECIPE.with_default_config([*FILES, *overrides]))


def test_paper_config_holds_upstreams_setting():
    c = _paper()
    d, a, r, rm = c.data, c.actor_rollout_ref.actor, c.actor_rollout_ref.rollout, c.reward.reward_model
    assert c.actor_rollout_ref.model.path == rm.model.path == "PRIME-RL/Eurus-2-7B-SFT"
    assert (d.train_batch_size, d.oversample_factor, d.gen_batch_size, r.n) == (64, 4.0, 256, 4)
    assert (d.filter_accuracy, d.accuracy_lower_bound, d.accuracy_upper_bound) == (True, 0.2, 0.8)
    assert (d.filter_truncate, d.truncation) == (True, "right")
    assert (d.max_prompt_length, d.max_response_length) == (1024, 3072)
    assert (a.optim.lr, a.ppo_mini_batch_size, a.entropy_coeff, a.use_kl_loss) == (5e-7, 64, 0.001, False)
    assert (rm.enable, rm.mini_batch_size, rm.micro_batch_size_per_gpu) == (True, 64, 1)
    assert (rm.prime_granularity, rm.prime_norm) == ("token", "batch_norm")
    m = rm.model
    assert (m.ref_type, m["update"], m.beta_train, m.loss_type) == ("freeze", "before", 0.05, "ce")
    assert (m.optim.lr, m.optim.grad_clip, m.optim.weight_decay) == (1e-6, 10.0, 0.0)
    algo = c.algorithm
    assert (algo.adv_estimator, algo.reward_gt_coef, algo.reward_dpo_coef) == ("rloo", 5.0, 5.0)
    assert c.reward.reward_manager == "prime" and r.name == "vllm"
    assert (c.trainer.n_gpus_per_node, c.trainer.total_epochs, c.trainer.balance_batch) == (8, 15, False)


def test_the_filter_defaults_are_upstreams():
    # upstream's prime_trainer.yaml: filter_truncate True, truncation right; false stays an option
    for c in (_cpu(), load_prime_config([*FILES])):
        assert (c.data.filter_truncate, c.data.truncation) == (True, "right")
    assert _cpu("data.filter_truncate=false").data.filter_truncate is False


def test_paper_config_validates_apart_from_the_missing_gpu(monkeypatch):
    with pytest.raises(ConfigError) as ei:
        validate_prime_config(_paper("trainer.device=cpu"))
    # the GPU-only offload flags of the actor and the PRM, and vLLM (a GPU package) not being installed, are
    # the only problems on this CPU machine
    vllm = "pip install 'verl-workers[vllm]'"
    assert len(ei.value.problems) == 2 + (importlib.util.find_spec("vllm") is None)
    assert all(("offload" in p and "CPU" in p) or vllm in p for p in ei.value.problems)
    from verl.trainer.config import installed

    monkeypatch.setattr(installed, "_missing", lambda module: False)  # vLLM: a GPU package, not installed here
    validate_prime_config(_paper(
        "trainer.device=cpu", "actor_rollout_ref.actor.fsdp_config.param_offload=false",
        "actor_rollout_ref.actor.fsdp_config.optimizer_offload=false",
        "reward.reward_model.model.fsdp_config.param_offload=false",
        "reward.reward_model.model.fsdp_config.optimizer_offload=false",
    ))  # fmt: skip


def test_cpu_default_loads_validates_and_leaves_assets_to_the_recipe():
    argv = RECIPE.with_default_config(["trainer.total_training_steps=2"])
    assert argv[:2] == ["--config", str(RECIPE.configs_dir / CPU_CONFIG)]
    assert RECIPE.with_default_config(["--config", "x.yaml"]) == ["--config", "x.yaml"]
    bare = load_prime_config(argv)
    assert bare.actor_rollout_ref.model.path is None and bare.data.train_files is None  # built by cpu_assets
    c = _cpu()
    validate_prime_config(c)
    assert c.trainer.device == "cpu" and c.reward.reward_model.enable and c.algorithm.adv_estimator == "rloo"
    # derived: 16 prompts x oversample 4 generated; the PRM starts from the policy's weights and tokenizer
    assert c.data.gen_batch_size == 64 and c.reward.reward_model.model.path == "/models/sft"
    assert c.reward.reward_model.model.input_tokenizer == "/models/sft"
    assert prm_world_size(c) == 1


def test_gen_batch_size_is_derived_unless_set():
    assert derived_gen_batch_size(16, 4.0) == 64 and derived_gen_batch_size(10, 1.5) == 15
    assert derived_gen_batch_size(5, 1.5) is None
    assert _cpu("data.oversample_factor=2").data.gen_batch_size == 32
    validate_prime_config(_cpu("data.gen_batch_size=64"))  # the derived value, given explicitly
    with pytest.raises(ConfigError, match=r"data.gen_batch_size=48: PRIME generates .* = 64 prompts"):
        validate_prime_config(_cpu("data.gen_batch_size=48"))
    with pytest.raises(
        ConfigError, match=r"data.train_batch_size=5 x data.oversample_factor=1.5 is not a whole"
    ):
        validate_prime_config(_cpu("data.train_batch_size=5", "data.oversample_factor=1.5"))


def test_prime_problems_are_reported_together_in_the_users_terms():
    cfg = _cpu(
        "algorithm.adv_estimator=grpo", "algorithm.use_kl_in_reward=true", "data.accuracy_lower_bound=0.9",
        "reward.reward_model.model.update=sometimes", "reward.reward_model.model.ref_type=policy",
        "reward.reward_model.model.loss_type=dpo", "reward.reward_model.model.beta_train=0",
        "reward.reward_model.prime_granularity=step", "reward.reward_model.prime_norm=layer",
        "reward.reward_model.mini_batch_size=24", "reward.reward_model.model.input_tokenizer=/models/other",
        "reward.reward_model.max_length=512", "reward.launch_reward_fn_async=true",
    )  # fmt: skip
    with pytest.raises(ConfigError) as ei:
        validate_prime_config(cfg)
    text = str(ei.value)
    for expected in (
        "algorithm.adv_estimator='grpo'", "algorithm.use_kl_in_reward=true",
        "data.accuracy_lower_bound=0.9, accuracy_upper_bound=0.8", "model.update='sometimes' is not one of",
        "model.ref_type='policy': only freeze", "model.loss_type='dpo': only ce", "beta_train=0.0 must be > 0",
        "prime_granularity='step'", "prime_norm='layer'",
        "mini_batch_size=24 trajectories does not divide a step's data.train_batch_size 16 x rollout.n 4 = 64",
        "input_tokenizer='/models/other'", "reward.reward_model.max_length=512", "launch_reward_fn_async=true",
    ):  # fmt: skip
        assert expected in text, expected


def test_sizes_and_sources_are_checked():
    with pytest.raises(ConfigError, match=r"rollout.n=1: RLOO needs at least 2"):
        validate_prime_config(_cpu("actor_rollout_ref.rollout.n=1", "reward.reward_model.mini_batch_size=16"))
    with pytest.raises(ConfigError, match="no reward source left"):
        validate_prime_config(_cpu("reward.reward_model.enable=false", "algorithm.reward_gt_coef=0"))
    with pytest.raises(ConfigError, match="micro_batch_size_per_gpu=None: the PRM needs rows per forward"):
        validate_prime_config(_cpu("reward.reward_model.micro_batch_size_per_gpu=null"))
    with pytest.raises(ConfigError, match=r"enable_resource_pool=true needs nnodes >= 1 .* \(got 0 x 8\)"):
        validate_prime_config(_cpu("reward.reward_model.enable_resource_pool=true"))
    own = _cpu("reward.reward_model.enable_resource_pool=true", "reward.reward_model.nnodes=1",
               "reward.reward_model.n_gpus_per_node=2")  # fmt: skip
    assert prm_world_size(own) == 2
    validate_prime_config(own)
    with pytest.raises(
        ConfigError, match="mini_batch_size=3 trajectories must be a positive multiple of the 2"
    ):
        validate_prime_config(
            _cpu(
                "reward.reward_model.enable_resource_pool=true",
                "reward.reward_model.nnodes=1",
                "reward.reward_model.n_gpus_per_node=2",
                "reward.reward_model.mini_batch_size=3",
            )
        )
    # the outcome-only baseline needs no PRM keys to be right
    validate_prime_config(
        _cpu("reward.reward_model.enable=false", "reward.reward_model.model.update=sometimes")
    )


def test_unknown_prime_keys_are_errors_with_a_suggestion():
    with pytest.raises(ConfigError, match="oversample_factr"):
        _cpu("data.oversample_factr=2")
