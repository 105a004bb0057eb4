"""Engine checkpoints (sharded, torch.distributed.checkpoint); see ``verl.workers.checkpoint.dcp``."""

from verl.workers.checkpoint.dcp import (
    is_complete_checkpoint,
    load_engine_checkpoint,
    read_meta,
    save_engine_checkpoint,
)

__all__ = ["is_complete_checkpoint", "load_engine_checkpoint", "read_meta", "save_engine_checkpoint"]
