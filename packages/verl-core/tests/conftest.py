"""verl-core's tests run in an environment of verl-core alone (scripts/ci_matrix.py): no verl-workers.

The configs they validate name engines that verl-workers provides (the ``native`` rollout, ``fsdp2``,
with ``verl-workers[megatron]`` the Megatron strategy, with ``verl-workers[lora]`` LoRA through peft), and
validation refuses what is missing. For these tests those packages count as installed, so the config
tests and the port report read the same in every environment; the workers themselves come from the
tests' own toy classes, never from verl-workers. Every other module is looked up for real, and
``test_optional_deps.py`` tests the check itself.
"""

import pytest
from verl.trainer.config import installed

_real_missing = installed._missing
SIBLING_MODULES = ("verl.workers", "megatron.core", "peft")


def _missing_but_workers(module: str) -> bool:
    if module in SIBLING_MODULES:
        return False
    return _real_missing(module)


@pytest.fixture(autouse=True)
def _verl_workers_counts_as_installed(monkeypatch):
    monkeypatch.setattr(installed, "_missing", _missing_but_workers)
