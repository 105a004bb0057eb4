"""Entry point of the ``verl.plugins`` group: importing this registers verl-rewards' objects."""

from verl.registries import REWARD_MANAGERS
from verl.rewards.managers import MANAGERS

for _name, _cls in MANAGERS.items():
    REWARD_MANAGERS.register(_name, _cls)
