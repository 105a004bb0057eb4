"""Training engines (``actor.strategy`` / ``critic.strategy``): the seam and the FSDP engines.

Importing this package registers ``fsdp2`` and ``fsdp`` in ``verl.registries.TRAINING_ENGINES``.
"""

from verl.workers.engine.base import BaseEngine, LossFn, build_engine, register_engine
from verl.workers.engine.fsdp import FSDP2Engine, FSDPEngine

__all__ = ["BaseEngine", "FSDP2Engine", "FSDPEngine", "LossFn", "build_engine", "register_engine"]
