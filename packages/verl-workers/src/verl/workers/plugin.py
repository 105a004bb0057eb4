"""verl-workers' entry point in the ``verl.plugins`` group (see pyproject.toml).

Importing it registers what this package provides: training engines (``fsdp2``, ``fsdp``) in
``TRAINING_ENGINES``, rollout engines (``hf``) in ``ROLLOUT_ENGINES``, and the worker classes
``actor_rollout_ref`` and ``critic`` in ``WORKER_CLASSES``, which ``main_ppo`` maps roles to.
"""

import verl.workers.engine  # noqa: F401  (registers fsdp2, fsdp)
import verl.workers.rollout  # noqa: F401  (registers hf)
import verl.workers.sft_worker  # noqa: F401  (registers sft, tiny_qwen2, the hf tokenizer loader)
from verl.registries import WORKER_CLASSES
from verl.workers.fsdp_workers import ActorRolloutRefWorker, CriticWorker

WORKER_CLASSES.register("actor_rollout_ref", ActorRolloutRefWorker)
WORKER_CLASSES.register("critic", CriticWorker)

# main_ppo loads its tokenizer through this registry (core never imports transformers).
from verl.trainer.model_builders import TOKENIZER_LOADERS  # noqa: E402
from verl.workers.tokenizer import hf_tokenizer  # noqa: E402

TOKENIZER_LOADERS.register("hf", hf_tokenizer)
