"""SPIN's two configs and its schema extension: upstream's numbers, the CPU default, the DPO and pairing keys
it adds, and the problems its validation names."""


import pytest
from verl.trainer.config import ConfigError, load_config
from verl_recipe_spin.config import load_spin_config, spin_problems, validate_spin_config
from verl_recipe_spin.main_spin import CPU_CONFIG, PAPER_CONFIG, RECIPE

PATHS = ["data.train_files=train.parquet", "actor_rollout_ref.model.path=model"]  # validation needs them set


def _paper(*overrides):
    return RECIPE.load_file(PAPER_CONFIG, overrides=overrides)


def test_paper_config_holds_upstreams_setting_and_validates(vllm_installed):
    c = _paper("trainer.device=cpu")  # the GPU (and vLLM, a GPU package) is all that is missing
    a, r, algo = c.actor_rollout_ref.actor, c.actor_rollout_ref.rollout, c.algorithm
    assert c.actor_rollout_ref.model.path == "Qwen/Qwen2.5-7B-Instruct"
    assert (c.data.train_batch_size, c.data.max_prompt_length, c.data.max_response_length) == (32, 1024, 1024)
    # one optimizer step per batch, as upstream's update (which never reads its script's mini-batch of 8)
    assert (a.ppo_mini_batch_size, a.ppo_epochs, a.optim.lr, r.n) == (32, 1, 1e-6, 2)
    assert (algo.spin_ties, algo.spin_update) == ("first_chosen", "one_step")
    assert (algo.adv_estimator, a.policy_loss.loss_mode, algo.spin_mode) == ("spin", "dpo", "reward")
    assert (algo.dpo_beta, algo.dpo_loss_type, a.dpo_beta, a.dpo_loss_type) == (
        0.1,
        "sigmoid",
        0.1,
        "sigmoid",
    )
    assert (c.trainer.ref_update_freq, c.trainer.n_gpus_per_node, c.trainer.test_freq) == (1, 4, 1)
    validate_spin_config(c)
    # the paper's own pairs on GSM8K: the dataset's worked solution as chosen
    validate_spin_config(
        _paper(
            "trainer.device=cpu",
            "algorithm.spin_mode=sft",
            "algorithm.spin_target_key=extra_info.answer",
            "actor_rollout_ref.rollout.n=1",
        )
    )


def test_no_config_flag_means_the_cpu_default():
    argv = RECIPE.with_default_config(["trainer.total_training_steps=2"])
    assert argv[:2] == ["--config", str(RECIPE.configs_dir / CPU_CONFIG)]
    c = load_spin_config(argv)
    assert c.trainer.device == "cpu" and c.actor_rollout_ref.model.path is None and c.data.train_files is None
    assert (c.algorithm.spin_mode, c.actor_rollout_ref.rollout.n, c.trainer.balance_batch) == (
        "sft",
        1,
        False,
    )
    assert not spin_problems(c)
    # upstream's pairs on the same task, as the README's second command runs them
    assert not spin_problems(
        load_spin_config([*argv, "algorithm.spin_mode=reward", "actor_rollout_ref.rollout.n=8"])
    )


def test_the_recipe_adds_typed_keys_and_core_does_not_know_them():
    c = load_spin_config(["algorithm.dpo_beta=0.5", "algorithm.dpo_loss_type=ipo"])
    assert (c.actor_rollout_ref.actor.dpo_beta, c.actor_rollout_ref.actor.dpo_loss_type) == (0.5, "ipo")
    assert (c.trainer.ref_update_freq, c.algorithm.spin_mode, c.algorithm.spin_target_key) == (
        -1,
        "reward",
        "reward_model.ground_truth",
    )
    with pytest.raises(ConfigError, match="trainer.ref_update_freq='often'"):
        load_spin_config(["trainer.ref_update_freq=often"])
    for key in ("algorithm.dpo_beta=0.1", "trainer.ref_update_freq=1"):
        with pytest.raises(ConfigError, match="unknown key"):
            load_config([key])  # core's own entry point refuses the recipe's keys


def test_validation_names_every_spin_problem_with_cores(config_error_names):
    c = load_spin_config(
        [
            *PATHS,
            "algorithm.dpo_beta=0",
            "algorithm.dpo_loss_type=hinge",
            "algorithm.spin_mode=sft",
            "actor_rollout_ref.rollout.n=4",
            "trainer.balance_batch=true",
            "trainer.n_gpus_per_node=2",
            "data.train_batch_size=3",
            "actor_rollout_ref.actor.ppo_mini_batch_size=3",
            "actor_rollout_ref.actor.use_rollout_log_probs=true",
        ]
    )
    config_error_names(validate_spin_config, c, (
        "algorithm.adv_estimator='grpo'",
        "loss_mode='vanilla'",
        "algorithm.dpo_beta=0.0 must be > 0",
        "actor_rollout_ref.actor.dpo_loss_type='hinge'",
        "set actor_rollout_ref.rollout.n=1 (got 4)",
        "no rollout log-probs",
        "trainer.balance_batch=true reorders rows",
        "data.train_batch_size=3 prompts: every one of the 2 workers",
        "not divisible by actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",  # core's
    ))  # fmt: skip
    c = load_spin_config(
        RECIPE.with_default_config([*PATHS, "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=3"])
    )
    assert any("an even divisor of 16 (whole pairs)" in p for p in spin_problems(c))
    c = load_spin_config(RECIPE.with_default_config([*PATHS, "algorithm.spin_mode=reward"]))  # n stays 1
    assert any("rollout.n=1 must be >= 2" in p for p in spin_problems(c))


def test_a_bad_cpu_config_fails_before_the_assets_are_built(tmp_path, no_demo_assets):
    with pytest.raises(ConfigError, match="trainer.balance_batch=true reorders rows"):
        RECIPE.load_config([f"trainer.default_local_dir={tmp_path}", "trainer.balance_batch=true"])


def test_upstreams_update_and_ties_are_the_default_and_ours_are_options():
    c = load_spin_config(RECIPE.with_default_config([]))
    assert (c.algorithm.spin_ties, c.algorithm.spin_update) == ("first_chosen", "one_step")
    assert c.actor_rollout_ref.actor.ppo_mini_batch_size == c.data.train_batch_size
    several = ["actor_rollout_ref.actor.ppo_mini_batch_size=8", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4"]
    problems = spin_problems(load_spin_config(RECIPE.with_default_config(several)))
    assert problems == [
        "algorithm.spin_update=one_step takes one optimizer step per batch (upstream: the batch's gradients "
        "accumulated), but actor_rollout_ref.actor.ppo_mini_batch_size=8 with data.train_batch_size=16 and "
        "actor_rollout_ref.actor.ppo_epochs=1 make 2 steps; set ppo_mini_batch_size=16 and ppo_epochs=1, or algorithm.spin_update=mini_batches"
    ]
    assert not spin_problems(load_spin_config(RECIPE.with_default_config([*several, "algorithm.spin_update=mini_batches"])))
    text = "\n".join(spin_problems(load_spin_config(RECIPE.with_default_config(
        ["algorithm.spin_ties=drop", "algorithm.spin_update=often"]))))  # fmt: skip
    assert "spin_ties=drop: spin_mode=sft always prefers the target" in text
    assert "algorithm.spin_update='often' is not one of: one_step, mini_batches" in text
    ok = load_spin_config(RECIPE.with_default_config(["algorithm.spin_mode=reward", "actor_rollout_ref.rollout.n=8", "algorithm.spin_ties=drop"]))
    assert not spin_problems(ok)


@pytest.mark.parametrize(
    "override, problem",
    [
        ("actor_rollout_ref.ref.fsdp_config.param_offload=true",
         "actor_rollout_ref.ref.fsdp_config.param_offload=true means nothing on CPU"),
        ("actor_rollout_ref.ref.ulysses_sequence_parallel_size=2",
         "actor_rollout_ref.ref.ulysses_sequence_parallel_size=2 is implemented for strategy fsdp2"),
        ("actor_rollout_ref.actor.use_dynamic_bsz=true",  # with use_remove_padding=true, set below
         "actor_rollout_ref.actor.use_dynamic_bsz=true with model.use_remove_padding packs micro-batches"),
    ],
)
def test_settings_the_workers_refuse_are_refused_before_ray(override, problem):
    """The DPO loss runs the reference (the schema opens its section): its settings are checked as the
    actor's are; token-budget micro-batches would split the pairs. At validation, not in a worker."""
    argv = RECIPE.with_default_config([*PATHS, "actor_rollout_ref.actor.strategy=fsdp",
                                       "actor_rollout_ref.model.use_remove_padding=true", override])
    with pytest.raises(ConfigError) as e:
        validate_spin_config(load_spin_config(argv))
    assert any(p.startswith(problem) for p in e.value.problems), e.value.problems
