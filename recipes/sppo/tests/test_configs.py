"""SPPO's two configs and its schema extension: upstream's numbers, the CPU default, the eta and baseline
keys, and what validation refuses."""


import pytest
from verl.trainer.config import ConfigError, load_config
from verl_recipe_sppo.config import load_sppo_config, sppo_problems, validate_sppo_config
from verl_recipe_sppo.main_sppo import CPU_CONFIG, PAPER_CONFIG, RECIPE


def test_paper_config_holds_upstreams_setting_and_validates(vllm_installed):
    # the GPU (and vLLM, a GPU package) is all that is missing
    c = RECIPE.load_file(PAPER_CONFIG, overrides=["trainer.device=cpu"])
    a, r = c.actor_rollout_ref.actor, c.actor_rollout_ref.rollout
    assert c.actor_rollout_ref.model.path == "Qwen/Qwen2.5-7B-Instruct"
    assert (c.data.train_batch_size, c.data.max_prompt_length, c.data.max_response_length) == (
        1024,
        1024,
        512,
    )
    assert (a.ppo_mini_batch_size, a.ppo_micro_batch_size_per_gpu, a.optim.lr, a.optim.lr_warmup_steps) == (
        256,
        4,
        1e-6,
        15,
    )
    assert (c.algorithm.adv_estimator, a.policy_loss.loss_mode, c.algorithm.sppo_eta, a.sppo_eta) == (
        "sppo",
        "sppo",
        1.0,
        1.0,
    )
    # upstream's setting runs as upstream has it: one answer per prompt, the softmean over the batch
    assert not a.use_kl_loss and not c.algorithm.use_kl_in_reward and r.n == 1
    assert c.algorithm.sppo_baseline == "batch"
    assert (c.trainer.n_gpus_per_node, c.trainer.total_epochs, c.trainer.test_freq) == (4, 20, 1)
    validate_sppo_config(c)


def test_no_config_flag_means_the_cpu_default():
    argv = RECIPE.with_default_config(["trainer.total_training_steps=2"])
    assert argv[:2] == ["--config", str(RECIPE.configs_dir / CPU_CONFIG)]
    assert RECIPE.with_default_config(["--config", "x.yaml"]) == ["--config", "x.yaml"]
    c = load_sppo_config(argv)
    assert c.trainer.device == "cpu" and c.trainer.total_training_steps == 2
    assert c.actor_rollout_ref.model.path is None and c.data.train_files is None  # assets are built
    assert (c.algorithm.adv_estimator, c.actor_rollout_ref.actor.policy_loss.loss_mode) == (
        "sppo_win_rate",
        "sppo",
    )
    assert not sppo_problems(c)


def test_the_recipe_adds_two_typed_keys_and_core_does_not_know_them():
    c = load_sppo_config(["algorithm.sppo_eta=0.5"])
    assert c.actor_rollout_ref.actor.sppo_eta == 0.5  # the actor's eta follows algorithm.sppo_eta ...
    c = load_sppo_config(["algorithm.sppo_eta=0.5", "actor_rollout_ref.actor.sppo_eta=2"])
    assert (c.algorithm.sppo_eta, c.actor_rollout_ref.actor.sppo_eta) == (0.5, 2.0)  # ... unless set itself
    with pytest.raises(ConfigError, match="algorithm.sppo_eta='high'"):
        load_sppo_config(["algorithm.sppo_eta=high"])
    with pytest.raises(ConfigError, match="did you mean 'algorithm.sppo_eta'"):
        load_sppo_config(["algorithm.sppo_etta=1"])
    with pytest.raises(ConfigError, match="unknown key 'algorithm.sppo_eta'"):
        load_config(["algorithm.sppo_eta=1"])  # core's own entry point refuses the recipe's key


def test_validation_names_every_sppo_problem_with_cores(config_error_names):
    c = load_sppo_config(
        [
            "data.train_files=train.parquet",  # validation needs the data and model set
            "actor_rollout_ref.model.path=model",
            "algorithm.adv_estimator=grpo",
            "actor_rollout_ref.actor.policy_loss.loss_mode=vanilla",
            "algorithm.sppo_eta=0",
            "data.train_batch_size=0",
        ]
    )
    config_error_names(validate_sppo_config, c, (
        "algorithm.adv_estimator='grpo'",
        "loss_mode='vanilla'",
        "algorithm.sppo_eta=0.0 must be > 0",
        "actor_rollout_ref.actor.sppo_eta=0.0 must be > 0",
        "data.train_batch_size=0 must be a positive integer",  # core's
    ))  # fmt: skip


def test_a_bad_cpu_config_fails_before_the_assets_are_built(tmp_path, no_demo_assets):
    with pytest.raises(ConfigError, match="ppo_micro_batch_size_per_gpu=64"):
        RECIPE.load_config(
            [
                f"trainer.default_local_dir={tmp_path}",
                "data.train_batch_size=4",
                "actor_rollout_ref.actor.ppo_mini_batch_size=4",
            ]
        )


def test_upstreams_setting_runs_and_the_group_baseline_is_an_option():
    upstream = ["algorithm.adv_estimator=sppo", "actor_rollout_ref.rollout.n=1"]
    c = load_sppo_config(RECIPE.with_default_config(upstream))
    assert c.algorithm.sppo_baseline == "batch" and not sppo_problems(c)  # upstream's default, not refused
    assert sppo_problems(load_sppo_config(RECIPE.with_default_config([*upstream, "algorithm.sppo_baseline=group"]))) == [
        "algorithm.sppo_baseline=group compares the answers to one prompt with each other, but "
        "actor_rollout_ref.rollout.n=1; set rollout.n >= 2, or sppo_baseline=batch (upstream's)"
    ]
    group = ["algorithm.adv_estimator=sppo", "algorithm.sppo_baseline=group"]
    assert not sppo_problems(load_sppo_config(RECIPE.with_default_config(group)))  # n=8 answers per prompt
    text = "\n".join(sppo_problems(load_sppo_config(RECIPE.with_default_config(
        ["actor_rollout_ref.rollout.n=1", "algorithm.sppo_baseline=group"]))))  # fmt: skip
    assert "adv_estimator=sppo_win_rate compares the answers to one prompt with each other" in text
    assert "algorithm.sppo_baseline=group: the baseline belongs to adv_estimator=sppo" in text
