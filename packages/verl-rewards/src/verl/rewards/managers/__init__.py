"""Reward managers: turn a generated batch into token-level scores (see `base`)."""

from verl.rewards.managers.base import RewardManagerBase
from verl.rewards.managers.batch import BatchRewardManager
from verl.rewards.managers.dapo import DAPORewardManager
from verl.rewards.managers.naive import NaiveRewardManager
from verl.rewards.managers.prime import PrimeRewardManager

MANAGERS = {
    "naive": NaiveRewardManager,
    "batch": BatchRewardManager,
    "dapo": DAPORewardManager,
    "prime": PrimeRewardManager,
}

__all__ = [
    "MANAGERS",
    "BatchRewardManager",
    "DAPORewardManager",
    "NaiveRewardManager",
    "PrimeRewardManager",
    "RewardManagerBase",
]
