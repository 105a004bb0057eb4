"""Core's reward-manager loader (the one implementation; verl.rewards.load_reward_manager wraps it).

Each test pins one behaviour: option passing and precedence, overlong shaping (never silently dropped),
the response budget, custom scorer loading and its errors, sandbox options, the judge hook, defaults.
"""

import pickle
import sys
import textwrap

import pytest
from verl.registries import REWARD_MANAGERS
from verl.trainer.config import load_config
from verl.trainer.ppo.reward import SCORE_WRAPPERS, load_custom_reward_function, load_reward_manager


class _RecordingManager:
    """Takes overlong shaping (names the options) and anything else; records what it got."""

    def __init__(
        self,
        tokenizer,
        num_examine,
        compute_score=None,
        reward_fn_key="data_source",
        max_resp_len=None,
        overlong_buffer=None,
        **kwargs,
    ):
        self.tokenizer, self.num_examine = tokenizer, num_examine
        self.compute_score, self.reward_fn_key = compute_score, reward_fn_key
        self.max_resp_len, self.overlong_buffer = max_resp_len, overlong_buffer
        self.kwargs = kwargs


class _StrictManager:
    """No overlong options, no score_kwargs, no **kwargs."""

    def __init__(self, tokenizer, num_examine, compute_score=None, reward_fn_key="data_source"):
        self.compute_score = compute_score


class _CatchAllManager:
    """Swallows any option: overlong shaping must not be handed to it (it would be ignored silently)."""

    def __init__(self, tokenizer, num_examine, compute_score=None, reward_fn_key="data_source", **kwargs):
        pass


@pytest.fixture
def managers():
    for name, cls in [
        ("test_recording", _RecordingManager),
        ("test_strict", _StrictManager),
        ("test_catch_all", _CatchAllManager),
        ("batch_like", _RecordingManager),
    ]:
        REWARD_MANAGERS.register(name, cls)
    yield
    for name in ("test_recording", "test_strict", "test_catch_all", "batch_like"):
        REWARD_MANAGERS.unregister(name)


@pytest.fixture
def judge_wrapper():
    """Replace the judge wrapper (verl-rewards' one may be registered) by a recording stub."""
    # `in` loads plugins first, so the real wrapper cannot register over the stub later
    previous = SCORE_WRAPPERS.get("judge") if "judge" in SCORE_WRAPPERS else None
    SCORE_WRAPPERS.unregister("judge")
    calls = []

    def stub(options, rule):
        calls.append((options, rule))
        return "judged"

    SCORE_WRAPPERS.register("judge", stub)
    yield calls
    SCORE_WRAPPERS.unregister("judge")
    if previous is not None:
        SCORE_WRAPPERS.register("judge", previous)


def _write(tmp_path, body, name="rw.py"):
    f = tmp_path / name
    f.write_text(textwrap.dedent(body))
    return str(f)


# ----------------------------------------------------------------------------------- options, overlong
def test_overlong_buffer_and_budget_are_passed_when_enabled(managers):
    cfg = load_config(
        [
            "reward.reward_manager=test_recording",
            "reward.overlong_buffer.enable=true",
            "reward.overlong_buffer.len=4",
            "reward.overlong_buffer.penalty_factor=0.5",
            "data.max_response_length=16",
            "+reward.reward_kwargs.extra=3",
        ]
    )
    manager = load_reward_manager(cfg, tokenizer="tok", num_examine=2)
    assert manager.max_resp_len == 16  # rollout.response_length follows data.max_response_length
    assert manager.overlong_buffer == {"enable": True, "len": 4, "penalty_factor": 0.5, "log": False}
    assert manager.kwargs["extra"] == 3
    assert (manager.tokenizer, manager.num_examine) == ("tok", 2)


def test_budget_is_the_rollout_response_length_and_a_call_argument_overrides_it(managers):
    overrides = [
        "reward.reward_manager=test_recording",
        "reward.overlong_buffer.enable=true",
        "reward.overlong_buffer.len=2",
        "data.max_response_length=16",
        "actor_rollout_ref.rollout.response_length=8",
    ]
    cfg = load_config(overrides)
    assert load_reward_manager(cfg, None, 0).max_resp_len == 8
    assert load_reward_manager(cfg, None, 0, max_resp_len=5).max_resp_len == 5


def test_overlong_options_absent_when_disabled_and_budget_argument_is_dropped(managers):
    cfg = load_config(["reward.reward_manager=test_recording"])
    manager = load_reward_manager(cfg, tokenizer=None, num_examine=0)
    assert manager.overlong_buffer is None and manager.max_resp_len is None
    # main_ppo-style callers pass the budget always; without shaping a strict manager must not get it
    strict = load_config(["reward.reward_manager=test_strict"])
    load_reward_manager(strict, tokenizer=None, num_examine=0, max_resp_len=12)


@pytest.mark.parametrize("name", ["test_strict", "test_catch_all"])
def test_manager_without_overlong_support_fails_instead_of_ignoring_it(managers, name):
    cfg = load_config([f"reward.reward_manager={name}", "reward.overlong_buffer.enable=true"])
    with pytest.raises(
        ValueError,
        match=f"reward.overlong_buffer.enable=true needs reward.reward_manager=dapo \\(got '{name}'",
    ):
        load_reward_manager(cfg, tokenizer=None, num_examine=0)


def test_call_kwargs_override_config_reward_kwargs(managers):
    cfg = load_config(
        ["reward.reward_manager=test_recording", "+reward.reward_kwargs.a=1", "+reward.reward_kwargs.b=2"]
    )
    manager = load_reward_manager(cfg, None, 0, b=20, c=30)
    assert {k: manager.kwargs[k] for k in "abc"} == {"a": 1, "b": 20, "c": 30}


def test_reward_fn_key_comes_from_data_and_defaults_apply_to_a_partial_config(managers):
    cfg = load_config(["reward.reward_manager=test_recording", "data.reward_fn_key=source"])
    assert load_reward_manager(cfg, None, 0).reward_fn_key == "source"
    partial = {"reward": {"reward_manager": "test_recording"}}
    manager = load_reward_manager(partial, None, 0)
    assert manager.reward_fn_key == "data_source" and manager.kwargs == {} and manager.compute_score is None


def test_unknown_manager_names_the_known_ones(managers):
    with pytest.raises(
        KeyError, match="unknown reward manager 'test_recordin'.*Did you mean 'test_recording'"
    ):
        load_reward_manager({"reward": {"reward_manager": "test_recordin"}}, None, 0)


# ------------------------------------------------------------------------------------- custom scorer
def test_custom_reward_function_is_loaded_with_its_kwargs_bound(managers, tmp_path):
    path = _write(
        tmp_path,
        """
        def my_score(data_source, solution_str, ground_truth, extra_info=None, scale=1.0):
            return scale * float(solution_str == ground_truth)
    """,
    )
    cfg = load_config(
        [
            "reward.reward_manager=test_recording",
            f"reward.custom_reward_function.path={path}",
            "reward.custom_reward_function.name=my_score",
            "+reward.custom_reward_function.reward_kwargs.scale=3.0",
        ]
    )
    fn = load_reward_manager(cfg, None, 0).compute_score
    assert fn("src", "42", "42") == 3.0 and fn("src", "41", "42") == 0.0


def test_custom_reward_function_name_defaults_to_compute_score(managers, tmp_path):
    path = _write(
        tmp_path,
        """
        def compute_score(data_source, solution_str, ground_truth, extra_info=None):
            return len(solution_str)
    """,
    )
    cfg = {
        "reward": {"reward_manager": "test_recording", "custom_reward_function": {"path": path, "name": None}}
    }
    assert load_reward_manager(cfg, None, 0).compute_score("s", "abcd", "x") == 4


def test_custom_reward_function_errors_name_the_bad_input(tmp_path):
    with pytest.raises(FileNotFoundError, match="reward.custom_reward_function.path=.*nope.py.*no such file"):
        load_custom_reward_function(str(tmp_path / "nope.py"))
    broken = _write(tmp_path, "import no_such_module_xyz\n", "broken.py")
    with pytest.raises(
        ImportError,
        match="importing reward.custom_reward_function.path=.*broken.py.*failed: ModuleNotFoundError",
    ):
        load_custom_reward_function(broken)
    path = _write(
        tmp_path,
        """
        def helper(x):
            return x
        def per_row(data_source, solution_str, ground_truth, extra_info=None):
            return 1.0
        def two_args(a, b):
            return 0.0
        LIMIT = 3
    """,
    )
    with pytest.raises(
        AttributeError,
        match=r"name='missing' is not a function in .*rw.py; functions there: \['helper', 'per_row', 'two_args'\]",
    ):
        load_custom_reward_function(path, "missing")
    with pytest.raises(AttributeError, match="name='LIMIT' is not a function"):
        load_custom_reward_function(path, "LIMIT")
    with pytest.raises(
        TypeError, match=r"two_args\(a, b\) in .*cannot be called as compute_score\(data_source"
    ):
        load_custom_reward_function(path, "two_args")
    with pytest.raises(TypeError, match=r"with reward_kwargs \['scale'\]"):
        load_custom_reward_function(path, "per_row", {"scale": 2})


@pytest.fixture
def batch_is_recording():
    """The name ``batch`` (verl-rewards' BatchRewardManager) bound to the recording manager."""
    previous = REWARD_MANAGERS.get("batch") if "batch" in REWARD_MANAGERS else None
    REWARD_MANAGERS.unregister("batch")
    REWARD_MANAGERS.register("batch", _RecordingManager)
    yield
    REWARD_MANAGERS.unregister("batch")
    if previous is not None:
        REWARD_MANAGERS.register("batch", previous)


def test_batch_manager_checks_the_batched_signature(managers, batch_is_recording, tmp_path):
    path = _write(
        tmp_path,
        """
        def batched(data_sources, solution_strs, ground_truths, extra_infos, **kwargs):
            return [1.0] * len(solution_strs)
        def per_row(data_source, solution_str, ground_truth, extra_info=None):
            return 1.0
    """,
    )
    cfg = {"reward": {"reward_manager": "batch", "custom_reward_function": {"path": path, "name": "batched"}}}
    fn = load_reward_manager(cfg, None, 0).compute_score
    assert fn(
        data_sources=["a", "b"], solution_strs=["x", "y"], ground_truths=["x", "z"], extra_infos=[{}, {}]
    ) == [1.0, 1.0]
    cfg["reward"]["custom_reward_function"]["name"] = "per_row"
    with pytest.raises(TypeError, match="cannot be called as compute_score\\(data_sources, solution_strs"):
        load_reward_manager(cfg, None, 0)
    # the same per-row function is fine for a per-row manager
    cfg["reward"]["reward_manager"] = "batch_like"
    assert load_reward_manager(cfg, None, 0).compute_score("s", "a", "b") == 1.0


def test_custom_reward_function_pickles_by_value(tmp_path):
    import cloudpickle
    import ray.cloudpickle

    path = _write(
        tmp_path,
        """
        OFFSET = 0.5
        def score(data_source, solution_str, ground_truth, extra_info=None):
            return OFFSET + len(solution_str)
    """,
    )
    fn = load_custom_reward_function(path, "score")
    payloads = [cloudpickle.dumps(fn), ray.cloudpickle.dumps(fn)]
    # A worker process cannot import the user's file by module name: unpickling must not need it.
    module_name = fn.__module__
    saved = sys.modules.pop(module_name)
    try:
        for payload in payloads:
            assert pickle.loads(payload)("s", "abc", "x") == 3.5
    finally:
        sys.modules[module_name] = saved


# ------------------------------------------------------------------------------------------- sandbox
def test_sandbox_options_reach_the_built_in_scorer(managers):
    cfg = load_config(
        ["reward.reward_manager=test_recording", "reward.sandbox.timeout=5", "+reward.sandbox.url=http://sb"]
    )
    assert load_reward_manager(cfg, None, 0).kwargs["score_kwargs"] == {
        "sandbox": "local",
        "sandbox_options": {"timeout": 5, "memory_mb": 1024, "url": "http://sb"},
    }


def test_explicit_score_kwargs_win_over_the_sandbox_section(managers):
    cfg = {
        "reward": {
            "reward_manager": "test_recording",
            "sandbox": {"name": "sandbox_fusion", "timeout": 5},
            "reward_kwargs": {"score_kwargs": {"sandbox": "e2b", "other": 1}},
        }
    }
    assert load_reward_manager(cfg, None, 0).kwargs["score_kwargs"] == {
        "sandbox": "e2b",
        "other": 1,
        "sandbox_options": {"timeout": 5},
    }


def test_sandbox_is_not_applied_to_a_custom_scorer_or_a_manager_without_options(managers, tmp_path):
    path = _write(
        tmp_path,
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n    return 0.0\n",
    )
    cfg = load_config(["reward.reward_manager=test_recording", f"reward.custom_reward_function.path={path}"])
    assert "score_kwargs" not in load_reward_manager(cfg, None, 0).kwargs
    strict = load_config(["reward.reward_manager=test_strict"])  # schema default sandbox is set
    assert load_reward_manager(strict, None, 0).compute_score is None


# --------------------------------------------------------------------------------------------- judge
def test_enabled_judge_wraps_the_scorer_and_is_not_passed_as_an_option(managers, judge_wrapper, tmp_path):
    path = _write(
        tmp_path,
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n    return 0.0\n",
    )
    cfg = load_config(
        [
            "reward.reward_manager=test_recording",
            f"reward.custom_reward_function.path={path}",
            "+reward.reward_kwargs.judge.enable=true",
            "+reward.reward_kwargs.judge.model=m",
        ]
    )
    manager = load_reward_manager(cfg, None, 0)
    assert manager.compute_score == "judged" and "judge" not in manager.kwargs
    ((options, rule),) = judge_wrapper
    assert options == {"enable": True, "model": "m"} and rule("s", "x", "y") == 0.0


def test_disabled_judge_is_dropped_and_reward_model_judge_is_read(managers, judge_wrapper):
    cfg = {"reward": {"reward_manager": "test_recording", "reward_kwargs": {"judge": {"enable": False}}}}
    manager = load_reward_manager(cfg, None, 0)
    assert manager.compute_score is None and "judge" not in manager.kwargs and judge_wrapper == []
    cfg = {
        "reward": {
            "reward_manager": "test_recording",
            "reward_model": {"judge": {"enable": True, "weight": 2}},
        }
    }
    assert load_reward_manager(cfg, None, 0).compute_score == "judged"
    assert judge_wrapper == [({"enable": True, "weight": 2}, None)]


def test_validation_refuses_a_custom_function_the_manager_cannot_call(managers, tmp_path):
    """Checked with the config, before Ray and before a recipe's assets: a batch scorer under a per-sample
    manager names the manager, the file and the signature it needs."""
    from verl.trainer.config.rewards import check_reward

    batch_fn = _write(tmp_path, """
        def compute_score(data_sources, solution_strs, ground_truths, extra_infos):
            return [0.0 for _ in data_sources]
    """)
    per_sample = _write(tmp_path, """
        def compute_score(data_source, solution_str, ground_truth, extra_info=None):
            return 0.0
    """, name="ok.py")
    problems: list[str] = []
    check_reward(load_config(["reward.reward_manager=test_recording",
                              f"reward.custom_reward_function.path={batch_fn}"]), problems)  # fmt: skip
    assert len(problems) == 1
    assert problems[0].startswith(
        "reward.reward_manager=test_recording calls reward.custom_reward_function one sample at a time: "
        f"compute_score(data_sources, solution_strs, ground_truths, extra_infos) in {batch_fn} cannot be called as"
    ), problems
    problems.clear()
    check_reward(load_config(["reward.reward_manager=test_recording",
                              f"reward.custom_reward_function.path={per_sample}"]), problems)  # fmt: skip
    assert problems == []
