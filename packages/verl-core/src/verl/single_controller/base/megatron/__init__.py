"""Workers with Megatron-style (tensor x pipeline x context x data) parallelism and their dispatch modes.

``MegatronWorker`` declares each process's coordinates; ``Dispatch.MEGATRON_COMPUTE`` and friends
(:mod:`verl.single_controller.base.megatron_dispatch`, registered with the other dispatch modes by
``verl.single_controller.base.decorator``) send data to the data-parallel ranks and collect it from the
last pipeline stage's tensor-parallel rank 0. No Megatron import: core only knows the coordinates.
"""

from verl.single_controller.base.megatron.worker import DistGlobalInfo, DistRankInfo, MegatronWorker

__all__ = ["DistGlobalInfo", "DistRankInfo", "MegatronWorker"]
