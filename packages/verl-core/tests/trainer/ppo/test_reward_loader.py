"""Core's reward-manager loader: options reach the manager; overlong shaping is never silently dropped."""

import pytest
from verl.registries import REWARD_MANAGERS
from verl.trainer.config import load_config
from verl.trainer.ppo.reward import load_reward_manager


class _RecordingManager:
    def __init__(self, tokenizer, num_examine, compute_score=None, reward_fn_key="data_source", **kwargs):
        self.kwargs = kwargs
        self.reward_fn_key = reward_fn_key


class _StrictManager:
    def __init__(self, tokenizer, num_examine, compute_score=None, reward_fn_key="data_source"):
        pass


@pytest.fixture
def managers():
    REWARD_MANAGERS.register("test_recording", _RecordingManager)
    REWARD_MANAGERS.register("test_strict", _StrictManager)
    yield
    REWARD_MANAGERS.unregister("test_recording")
    REWARD_MANAGERS.unregister("test_strict")


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
    manager = load_reward_manager(cfg, tokenizer=None, num_examine=0)
    assert manager.kwargs["max_resp_len"] == 16
    assert manager.kwargs["overlong_buffer"]["len"] == 4
    assert manager.kwargs["overlong_buffer"]["penalty_factor"] == 0.5
    assert manager.kwargs["extra"] == 3


def test_overlong_options_absent_when_disabled(managers):
    cfg = load_config(["reward.reward_manager=test_recording"])
    manager = load_reward_manager(cfg, tokenizer=None, num_examine=0)
    assert "overlong_buffer" not in manager.kwargs and "max_resp_len" not in manager.kwargs


def test_manager_without_overlong_support_fails_instead_of_ignoring_it(managers):
    cfg = load_config(["reward.reward_manager=test_strict", "reward.overlong_buffer.enable=true"])
    with pytest.raises(TypeError, match="overlong_buffer|max_resp_len"):
        load_reward_manager(cfg, tokenizer=None, num_examine=0)
