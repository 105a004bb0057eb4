"""Load a user's scoring function from ``reward.custom_reward_function.path`` / ``.name``.

One implementation, in core (``verl.trainer.ppo.reward.load_custom_reward_function``), which the
reward-manager loader uses; these are its names under verl-rewards.
"""

from __future__ import annotations

from verl.trainer.ppo.reward import CUSTOM_BATCH_SIGNATURE as BATCH_SIGNATURE
from verl.trainer.ppo.reward import CUSTOM_SIGNATURE as SIGNATURE
from verl.trainer.ppo.reward import load_custom_reward_function

__all__ = ["BATCH_SIGNATURE", "SIGNATURE", "load_custom_reward_function"]
