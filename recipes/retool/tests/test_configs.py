"""The recipe's configs: the paper setting loads and validates (apart from the GPU), the CPU default is
complete once the recipe fills in its assets, and ReTool's own checks name what is wrong."""

import pytest
from verl.trainer.config import ConfigError
from verl_recipe_retool.config import BUILT_IN, load_retool_config, retool_problems, validate_retool_config
from verl_recipe_retool.main import CPU_CONFIG, PAPER_CONFIG, RECIPE, TOOL_KEY


def _paper(*overrides):
    return RECIPE.load_file(PAPER_CONFIG, overrides=overrides)


def _cpu(*overrides):
    built_in = [
        f"{k}={BUILT_IN}" for k in ("data.train_files", "data.val_files", "actor_rollout_ref.model.path")
    ]
    return load_retool_config(RECIPE.with_default_config([*built_in, *overrides]))


def test_paper_config_holds_upstreams_setting():
    c = _paper()
    a, r = c.actor_rollout_ref.actor, c.actor_rollout_ref.rollout
    assert (c.data.train_batch_size, a.ppo_mini_batch_size, r.n, r.val_kwargs.n) == (64, 16, 16, 30)
    assert (c.data.max_prompt_length, c.data.max_response_length, a.optim.lr) == (2048, 16384, 1e-6)
    assert (a.clip_ratio_low, a.clip_ratio_high, a.loss_agg_mode) == (0.2, 0.28, "token-mean")
    assert (r.name, r.mode, r.agent.default_agent_loop) == ("vllm", "async", "tool_agent")
    assert r.multi_turn.enable and r.multi_turn.max_assistant_turns == 16
    assert not c.algorithm.filter_groups.enable and c.algorithm.filter_groups.metric == "acc"  # upstream's script
    tools = RECIPE.configs_dir / "tool_config" / "sandbox_fusion.yaml"
    assert r.multi_turn.tool_config_path.endswith("tool_config/sandbox_fusion.yaml") and tools.is_file()


def test_paper_config_validates_apart_from_the_missing_gpu(fails_only_for_the_gpu):
    tools = RECIPE.configs_dir / "tool_config" / "sandbox_fusion.yaml"
    fails_only_for_the_gpu(validate_retool_config, _paper("trainer.device=cpu", f"{TOOL_KEY}={tools}"))


def test_paper_tool_config_builds_the_sandbox_fusion_interpreter():
    from verl.rewards.sandbox.fusion import SandboxFusionSandbox
    from verl.tools.tool_registry import initialize_tools_from_config

    (tool,) = initialize_tools_from_config(RECIPE.configs_dir / "tool_config" / "sandbox_fusion.yaml")
    assert tool.name == "code_interpreter" and isinstance(tool.sandbox, SandboxFusionSandbox)
    assert tool.timeout == 30 and tool.memory_mb == 1024


def test_cpu_default_is_valid_with_its_assets():
    argv = RECIPE.with_default_config(["trainer.total_training_steps=2"])
    assert argv[:2] == ["--config", str(RECIPE.configs_dir / CPU_CONFIG)]
    c = _cpu(f"{TOOL_KEY}={BUILT_IN}")
    validate_retool_config(c)
    assert c.retool.use_tool and c.trainer.device == "cpu" and c.actor_rollout_ref.rollout.val_kwargs.n == 1


def test_no_tool_arm_with_a_tool_config_is_refused():
    problems = retool_problems(_cpu("retool.use_tool=false", f"{TOOL_KEY}=tools.yaml"))
    assert problems == [
        f"retool.use_tool=false (the no-tool arm) but {TOOL_KEY}='tools.yaml'; "
        "unset the tool config or set retool.use_tool=true"
    ]


def test_retool_problems_name_the_keys():
    c = _cpu(
        f"{TOOL_KEY}=missing.yaml",
        "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=1",
        "actor_rollout_ref.rollout.agent.default_agent_loop=single_turn_agent",
        "retool.task_digits=9",
    )
    text = "\n".join(retool_problems(c))
    for needle in (
        "max_assistant_turns=1",
        "default_agent_loop='single_turn_agent'",
        "missing.yaml",
        "task_digits=9",
    ):
        assert needle in text


def test_unknown_retool_key_is_an_error():
    with pytest.raises(ConfigError, match="retool.use_tools"):
        _cpu("retool.use_tools=false")


def test_upstreams_reward_and_dataset_step_are_the_default():
    from verl_recipe_retool.config import recipe_files, retool_overrides

    ours = recipe_files()
    reward = [f"reward.custom_reward_function.path={ours['reward']}", "reward.custom_reward_function.name=compute_score"]
    dataset = [f"data.custom_cls.path={ours['dataset']}", "data.custom_cls.name=ReToolDataset"]
    c = _paper()
    assert (c.retool.reward, c.retool.answer_format) == ("upstream", True)
    assert retool_overrides(c) == reward + dataset
    assert retool_overrides(load_retool_config([])) == reward + dataset  # the schema's defaults
    # the CPU task keeps its prompts (the tiny model cannot read digits past the instruction: README)
    assert (_cpu().retool.reward, _cpu().retool.answer_format) == ("upstream", False)
    assert retool_overrides(_cpu()) == reward
    assert retool_overrides(_cpu("retool.answer_format=true")) == reward + dataset
    assert retool_overrides(_cpu("retool.reward=final_answer")) == []


def test_the_variants_are_refused_when_they_would_be_ignored():
    text = "\n".join(
        retool_problems(
            _cpu(
                "reward.custom_reward_function.path=mine.py",
                "data.custom_cls.path=mine_ds.py",
                "retool.answer_format=true",
                "retool.cold_start_data=missing.parquet",
                "retool.use_tool=false",
                "retool.reward=exact",
            )
        )
    )
    assert any("format='gpt-oss': the built-in cold start writes Hermes tool calls" in p for p in retool_problems(
        load_retool_config(RECIPE.with_default_config(["actor_rollout_ref.rollout.multi_turn.format=gpt-oss"]))))  # fmt: skip
    for needle in (
        "retool.reward='exact': must be one of upstream, final_answer",
        "retool.answer_format=true reads the data with the recipe's ReToolDataset, but data.custom_cls.path='mine_ds.py'",
        "retool.cold_start_data is ReTool-SFT data (tool-using traces) but retool.use_tool=false",
        "retool.cold_start_data='missing.parquet': no such file",
    ):
        assert needle in text, text
    # the user's own reward function is refused with upstream's reward, accepted with final_answer
    own = "reward.custom_reward_function.path=mine.py"
    assert any("retool.reward=upstream scores with the recipe's reward" in p for p in retool_problems(_cpu(own)))
    assert not retool_problems(_cpu(own, "retool.reward=final_answer"))
