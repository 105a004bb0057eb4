"""The recipe's configs: the paper's setting and the CPU default load and validate; what CollabLLM needs is
checked before anything starts; the paper's simulated user is built from its interaction YAML."""

import pytest
from verl.agent.interactions.base import load_interactions
from verl.trainer.config import ConfigError
from verl_recipe_collabllm.config import collabllm_problems, load_collabllm_config, validate_collabllm_config
from verl_recipe_collabllm.main import CPU_CONFIG, PAPER_CONFIG, RECIPE

INTERACTION = "actor_rollout_ref.rollout.multi_turn.interaction_config_path"


def test_paper_config_holds_upstreams_setting():
    c = RECIPE.load_file(PAPER_CONFIG)
    a, r = c.actor_rollout_ref.actor, c.actor_rollout_ref.rollout
    assert c.actor_rollout_ref.model.path == "Qwen/Qwen2.5-7B-Instruct"
    assert (c.data.train_batch_size, r.n, a.ppo_mini_batch_size, a.optim.lr) == (16, 8, 8, 1e-6)
    assert (c.data.max_prompt_length, c.data.max_response_length) == (8196, 2048)
    assert (a.use_kl_loss, a.kl_loss_coef, a.kl_loss_type) == (True, 0.001, "low_var_kl")
    mt = r.multi_turn
    assert (mt.enable, mt.max_user_turns, mt.max_assistant_turns, mt.num_repeat_rollouts) == (True, 2, 3, 3)
    assert r.agent.default_agent_loop == "collabllm_agent" and (r.name, r.mode) == ("vllm", "async")
    kw = c.reward.reward_kwargs
    assert c.reward.reward_manager == "collabllm"
    assert dict(kw.metric_weights) == {"accuracy": 1, "interactivity": 1, "token_amount": -1.0e-4}
    assert (kw.llm_judge_kwargs.model, kw.llm_judge_kwargs.max_tokens, kw.llm_judge_kwargs.temperature) == (
        "gpt-4o-mini",
        1024,
        0,
    )
    assert c.algorithm.adv_estimator == "grpo" and not c.algorithm.use_kl_in_reward
    assert (c.trainer.nnodes, c.trainer.n_gpus_per_node, c.trainer.total_epochs) == (1, 8, 20)


def test_paper_config_validates_apart_from_the_missing_gpu(fails_only_for_the_gpu):
    fails_only_for_the_gpu(validate_collabllm_config, RECIPE.load_file(PAPER_CONFIG, overrides=["trainer.device=cpu"]))


def test_paper_simulated_user_comes_from_its_interaction_yaml(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-used")
    user = load_interactions(RECIPE.configs_dir / "collabllm_interaction.yaml")["collabllm"]
    client = user.client
    assert (client.base_url, client.model, client.api_key_env) == (
        "https://api.openai.com/v1",
        "gpt-4o-mini",
        "OPENAI_API_KEY",
    )
    assert (user.num_retries, client.max_retries, client.params) == (
        5,
        3,
        {"max_tokens": 512, "temperature": 1.0},
    )
    monkeypatch.delenv("OPENAI_API_KEY")
    with pytest.raises(ValueError, match="OPENAI_API_KEY.*not set"):
        load_interactions(RECIPE.configs_dir / "collabllm_interaction.yaml")


def test_no_config_flag_means_the_cpu_default(tmp_path):
    argv = RECIPE.with_default_config(["trainer.total_training_steps=2"])
    assert argv[:2] == ["--config", str(RECIPE.configs_dir / CPU_CONFIG)]
    assert RECIPE.with_default_config(["--config", "x.yaml"]) == ["--config", "x.yaml"]
    c = load_collabllm_config(argv)
    assert c.trainer.device == "cpu" and c.actor_rollout_ref.rollout.multi_turn.num_repeat_rollouts == 3
    # filled in by the entry point: the task, the warm-started model, the rule-based user
    assert c.data.train_files is None and c.actor_rollout_ref.model.path is None
    assert c.actor_rollout_ref.rollout.multi_turn.interaction_config_path is None
    (tmp_path / "i.yaml").write_text("interaction: []\n")
    filled = [
        "data.train_files=t.parquet",
        "actor_rollout_ref.model.path=m",
        f"{INTERACTION}={tmp_path / 'i.yaml'}",
    ]
    assert collabllm_problems(load_collabllm_config([*argv, *filled])) == []
    problems = collabllm_problems(
        load_collabllm_config([*argv, *filled, f"{INTERACTION}={tmp_path / 'nope.yaml'}"])
    )
    assert problems == [f"{INTERACTION}={str(tmp_path / 'nope.yaml')!r}: no such file"]


def test_what_collabllm_needs_is_checked_up_front():
    bad = load_collabllm_config(
        RECIPE.with_default_config(
            [
                "reward.reward_manager=naive",
                "actor_rollout_ref.rollout.multi_turn.enable=false",
                "actor_rollout_ref.rollout.agent.default_agent_loop=tool_agent",
                "actor_rollout_ref.rollout.multi_turn.num_repeat_rollouts=0",
                "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=1",
                "+reward.reward_kwargs.metric_weights.interactivity=1",
            ]
        )
    )
    problems = "\n".join(collabllm_problems(bad))
    for expected in (
        "reward.reward_manager='naive'",
        "multi_turn.enable=false",
        "default_agent_loop='tool_agent'",
        "num_repeat_rollouts=0",
        "max_assistant_turns=1",
        "interaction_config_path is unset",
        "['interactivity'], which ask an LLM judge (accuracy_scorer=rule, completion_extraction=last_message): "
        "set reward.reward_kwargs.llm_judge_kwargs",
    ):
        assert expected in problems
    with pytest.raises(ConfigError, match="unknown"):  # the schema's typo check still holds
        load_collabllm_config(
            RECIPE.with_default_config(["actor_rollout_ref.rollout.multi_turn.num_repeat_rollout=3"])
        )
