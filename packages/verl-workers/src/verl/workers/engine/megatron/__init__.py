"""The ``megatron`` training engine (``actor.strategy`` / ``ref.strategy`` / ``critic.strategy``).

Modules: ``engine`` (the engine), ``model`` (GPT config and layer spec from an HF config), ``weights``
(HF <-> Megatron names and shards), ``schedule`` (micro-batches through the pipeline schedules),
``vocab_parallel`` (log-probs and entropy from vocab-split logits), ``optim`` (DDP, optimizer, LR),
``checkpoint`` (distributed checkpoints), ``parallel`` (process groups), ``cpu`` (CPU support).

Importing this package registers the engine without importing Megatron-Core (about 12 s); building it
needs ``verl-workers[megatron]``.
"""

from verl.workers.engine.megatron.engine import MegatronEngine

__all__ = ["MegatronEngine"]
