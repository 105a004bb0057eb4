"""Datasets for RL and SFT: the prompt dataset, its resumable loader and built-in task generators."""

from verl.utils.dataset.loader import StatefulPromptLoader, create_prompt_loader
from verl.utils.dataset.rl_dataset import (
    DatasetRowError,
    RLHFDataset,
    check_row,
    collate_fn,
    create_rl_dataset,
    read_rows,
)

__all__ = [
    "DatasetRowError",
    "RLHFDataset",
    "StatefulPromptLoader",
    "check_row",
    "collate_fn",
    "create_prompt_loader",
    "create_rl_dataset",
    "read_rows",
]
