"""main_ppo reads the config keys it accepts: custom_chat_template, hybrid_engine (refused before Ray)."""

import types

import pytest
from verl.trainer import main_ppo
from verl.trainer.config import ConfigError, load_config
from verl.trainer.model_builders import TOKENIZER_LOADERS

VALID = [
    "data.train_files=train.parquet",
    "actor_rollout_ref.model.path=/models/tiny",
    "trainer.n_gpus_per_node=1",
    "trainer.device=cpu",
    "data.train_batch_size=8",
    "actor_rollout_ref.rollout.n=2",
    "actor_rollout_ref.actor.ppo_mini_batch_size=8",
]


def test_custom_chat_template_replaces_the_tokenizers(monkeypatch):
    loaded = []

    def loader(path, trust_remote_code=False):
        tok = types.SimpleNamespace(path=path, chat_template="the model's own")
        loaded.append(tok)
        return tok

    monkeypatch.setitem(TOKENIZER_LOADERS._items, "hf", loader)
    assert main_ppo.load_tokenizer(load_config(VALID)).chat_template == "the model's own"
    cfg = load_config([*VALID, "actor_rollout_ref.model.custom_chat_template='{{ messages }}'"])
    tok = main_ppo.load_tokenizer(cfg)
    assert tok.chat_template == "{{ messages }}" and tok.path == "/models/tiny"


def test_hybrid_engine_false_is_refused_before_ray_starts(monkeypatch):
    def no_run(*a, **k):
        raise AssertionError("run_ppo must not be reached")

    monkeypatch.setattr(main_ppo, "run_ppo", no_run)
    monkeypatch.setenv("VERL_DEBUG", "1")  # the ConfigError itself, not the exit
    with pytest.raises(ConfigError, match="hybrid_engine=False: .* recipes/fully_async"):
        main_ppo.main([*VALID, "actor_rollout_ref.hybrid_engine=false"])


def test_hybrid_engine_false_is_refused_by_the_schema_for_every_colocated_trainer():
    """A recipe on core's trainer validates with core's schema: refused there, before its assets are built."""
    from verl.trainer.config import validate_config

    with pytest.raises(ConfigError, match="hybrid_engine=False: .* recipes/fully_async"):
        validate_config(load_config([*VALID, "actor_rollout_ref.hybrid_engine=false"]))


def test_return_multi_modal_inputs_false_is_refused_at_validation():
    from verl.trainer.config import validate_config

    with pytest.raises(ConfigError, match="return_multi_modal_inputs=False: .* nothing to turn off"):
        validate_config(load_config([*VALID, "data.return_multi_modal_inputs=false"]))


def _problems(*overrides) -> list[str]:
    from verl.trainer.config import validate_config

    try:
        validate_config(load_config([*VALID, *overrides]))
    except ConfigError as e:
        return e.problems
    return []


def test_clip_ratio_is_refused_when_both_sides_are_set_apart_from_it():
    a = "actor_rollout_ref.actor"
    assert _problems(f"{a}.clip_ratio=0.1") == []  # both sides follow it
    assert _problems(f"{a}.clip_ratio=0.1", f"{a}.clip_ratio_high=0.28") == []  # the low side follows it
    assert _problems(f"{a}.clip_ratio=0.1", f"{a}.clip_ratio_low=0.2", f"{a}.clip_ratio_high=0.28") == [
        f"{a}.clip_ratio=0.1 reaches the loss only through clip_ratio_low/high, which this config sets to "
        "0.2/0.28; leave it at its default (0.2) or drop the sides it should set"
    ]


def test_agent_loops_on_the_trainers_engines_refuse_the_batched_generate_options_and_tool_keys_need_tools():
    r = "actor_rollout_ref.rollout"
    multi_turn = [f"{r}.multi_turn.enable=true", f"{r}.name=hf"]
    problems = _problems(*multi_turn, f"{r}.ignore_eos=true", f"{r}.micro_batch_size=2", f"{r}.multi_turn.tool_timeout=5")
    # (verl-core's own environment also lacks verl-agent's default tool-call format: that problem is not ours here)
    problems = [p for p in problems if "unknown tool-call format" not in p]
    assert sorted(p.split(" is read only when ")[0] for p in problems) == [
        f"{r}.ignore_eos=True", f"{r}.micro_batch_size=2", f"{r}.multi_turn.tool_timeout=5.0"
    ], problems
    assert _problems(f"{r}.name=hf", f"{r}.ignore_eos=true", f"{r}.micro_batch_size=2") == []  # one generate call


def test_dynamic_sampling_refuses_greedy_groups_that_can_never_vary():
    on = ["algorithm.filter_groups.enable=true", "algorithm.filter_groups.metric=acc"]
    assert _problems(*on) == []
    assert _problems(*on, "actor_rollout_ref.rollout.do_sample=false") == [
        "actor_rollout_ref.rollout.do_sample=false gives every trajectory of a prompt the same tokens, so under "
        "algorithm.filter_groups.enable=true no group's metric ever varies and generation would never fill a "
        "batch; sample (do_sample=true) or turn dynamic sampling off"
    ]
