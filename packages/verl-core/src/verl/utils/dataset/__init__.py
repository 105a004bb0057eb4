"""Datasets for RL: the prompt dataset, its resumable loader and built-in task generators.

Imports are lazy so that the torch-free parts (`rows`, `tasks`, the preprocessing CLIs) start fast.
"""

from importlib import import_module

_EXPORTS = {
    "DatasetRowError": "verl.utils.dataset.rows",
    "check_row": "verl.utils.dataset.rows",
    "read_rows": "verl.utils.dataset.rows",
    "write_parquet": "verl.utils.dataset.rows",
    "RLHFDataset": "verl.utils.dataset.rl_dataset",
    "collate_fn": "verl.utils.dataset.rl_dataset",
    "create_rl_dataset": "verl.utils.dataset.rl_dataset",
    "StatefulPromptLoader": "verl.utils.dataset.loader",
    "create_prompt_loader": "verl.utils.dataset.loader",
    "create_rl_dataloader": "verl.utils.dataset.loader",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'verl.utils.dataset' has no attribute {name!r}")
