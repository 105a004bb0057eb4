"""Entry point of the ``verl.plugins`` group: importing this registers verl-rewards' objects."""

from verl.registries import REWARD_MANAGERS
from verl.rewards.managers import MANAGERS

for _name, _cls in MANAGERS.items():
    REWARD_MANAGERS.register(_name, _cls)

# The reward-model worker needs only core (transformers is imported in init_model).
from verl.registries import WORKER_CLASSES  # noqa: E402
from verl.rewards.models.rm_worker import RewardModelWorker  # noqa: E402

WORKER_CLASSES.register("reward_model", RewardModelWorker)
