"""The recipe's workers in the test's own process (no Ray): a one-process gloo group for their engines, and
two calls that meet in a collective run side by side."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path


def gloo_world_of_one(store_dir: Path) -> None:
    """Initialise torch.distributed as a gloo group of this process alone (unless a group exists)."""
    import torch.distributed as dist

    if not dist.is_initialized():
        dist.init_process_group("gloo", init_method=f"file://{store_dir / 'store'}", rank=0, world_size=1)


def both(a: Callable[[], object], b: Callable[[], object]) -> None:
    """Run two calls that meet in a collective (each side blocks until the other arrives); re-raise what
    either raised."""
    errors = []

    def call(fn):
        try:
            fn()
        except BaseException as e:
            errors.append(e)

    t = threading.Thread(target=call, args=(a,))
    t.start()
    call(b)
    t.join()
    assert not errors, errors
