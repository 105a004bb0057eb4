"""Fully asynchronous RL on disaggregated pools, and one-step-off, as a verl recipe (see README.md).

    uv run --package verl-recipe-fully-async verl-fully-async      # CPU default: 1 rollout + 1 trainer worker
    uv run --package verl-recipe-fully-async verl-one-step-off     # the same, one-step-off

`FullyAsyncRayTrainer` (trainer.py) runs core's training stages on the trainer pool while `Rollouter`
(rollouter.py) generates on the rollout pool; `Coordinator` (message_queue.py) bounds the staleness.
"""

from verl_recipe_fully_async.message_queue import Coordinator, MessageQueue, Sample, SyncRequest

__all__ = ["Coordinator", "FullyAsyncRayTrainer", "MessageQueue", "Sample", "SyncRequest"]


def __getattr__(name: str):
    # The trainer pulls in Ray and the workers; keep `import verl_recipe_fully_async` light.
    if name == "FullyAsyncRayTrainer":
        from verl_recipe_fully_async.trainer import FullyAsyncRayTrainer

        return FullyAsyncRayTrainer
    raise AttributeError(f"module 'verl_recipe_fully_async' has no attribute {name!r}")
