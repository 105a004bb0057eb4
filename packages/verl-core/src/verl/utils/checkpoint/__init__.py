"""Checkpoint bookkeeping: atomic ``global_step_N`` dirs, the latest pointer, pruning, trainer state."""

from verl.utils.checkpoint.checkpoint_manager import (
    STEP_DIR_PREFIX,
    TRACKER_FILE,
    atomic_checkpoint,
    atomic_write_text,
    checkpoint_path,
    clean_stale_temp_dirs,
    find_latest_ckpt_path,
    fsync_tree,
    get_checkpoint_tracker_filename,
    is_complete_checkpoint_dir,
    list_checkpoints,
    prune_checkpoints,
    read_latest_step,
)
from verl.utils.checkpoint.trainer_state import (
    TRAINER_STATE_FILE,
    get_rng_state,
    load_trainer_state,
    save_trainer_state,
    set_rng_state,
)

__all__ = [
    "STEP_DIR_PREFIX",
    "TRACKER_FILE",
    "TRAINER_STATE_FILE",
    "atomic_checkpoint",
    "atomic_write_text",
    "checkpoint_path",
    "clean_stale_temp_dirs",
    "find_latest_ckpt_path",
    "fsync_tree",
    "get_checkpoint_tracker_filename",
    "get_rng_state",
    "is_complete_checkpoint_dir",
    "list_checkpoints",
    "load_trainer_state",
    "prune_checkpoints",
    "read_latest_step",
    "save_trainer_state",
    "set_rng_state",
]
