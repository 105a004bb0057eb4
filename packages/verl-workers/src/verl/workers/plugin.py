"""verl-workers' entry point in the ``verl.plugins`` group (see pyproject.toml).

Importing it registers what this package provides: training engines (``fsdp2``, ``fsdp``) in
``TRAINING_ENGINES``, rollout engines (``hf``) in ``ROLLOUT_ENGINES``, the worker classes
``actor_rollout_ref``, ``critic`` and ``teacher`` (on-policy distillation; here; ``megatron_actor_rollout_ref``
and ``megatron_critic`` for ``strategy=megatron``) and ``sft`` (``verl.workers.sft_worker``) in ``WORKER_CLASSES``, which ``main_ppo`` / the SFT trainer map roles to, and core's model-library hooks
``TOKENIZER_LOADERS["hf"]`` and ``MODEL_BUILDERS["tiny_qwen2"]`` (also in ``sft_worker``).
"""

import verl.workers.engine  # noqa: F401  (registers fsdp2, fsdp)
import verl.workers.rollout  # noqa: F401  (registers hf)
import verl.workers.sft_worker  # noqa: F401  (registers sft, TOKENIZER_LOADERS["hf"], MODEL_BUILDERS["tiny_qwen2"])
from verl.registries import WORKER_CLASSES
from verl.workers import megatron_workers
from verl.workers.fsdp_workers import ActorRolloutRefWorker, CriticWorker
from verl.workers.teacher_worker import TeacherWorker

WORKER_CLASSES.register("actor_rollout_ref", ActorRolloutRefWorker)
WORKER_CLASSES.register("critic", CriticWorker)
WORKER_CLASSES.register("teacher", TeacherWorker)
WORKER_CLASSES.register("megatron_actor_rollout_ref", megatron_workers.ActorRolloutRefWorker)
WORKER_CLASSES.register("megatron_critic", megatron_workers.CriticWorker)
