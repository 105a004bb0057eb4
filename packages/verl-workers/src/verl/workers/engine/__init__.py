"""Training engines (``actor.strategy`` / ``critic.strategy``): the seam, the FSDP engines and Megatron.

Importing this package registers ``fsdp2``, ``fsdp`` and ``megatron`` in
``verl.registries.TRAINING_ENGINES`` (Megatron-Core itself is imported only when that engine is built).
"""

from verl.workers.engine.base import BaseEngine, LossFn, build_engine, register_engine
from verl.workers.engine.fsdp import FSDP2Engine, FSDPEngine
from verl.workers.engine.megatron import MegatronEngine

__all__ = ["BaseEngine", "FSDP2Engine", "FSDPEngine", "LossFn", "MegatronEngine", "build_engine", "register_engine"]
