"""``ray.init`` that survives Ray's fixed start-up window on an overloaded machine.

Ray waits a hard-coded 30 s for a new node's raylet to register with the GCS (``ray/_private/node.py``,
``raylet_start_wait_time_s``; no setting changes it) and raises "The current node timed out during
startup" when the machine is so busy that the raylet is slower. Nothing has run yet at that point, so
starting again is safe; any other failure propagates at once.
"""

from __future__ import annotations

import os
import sys
from typing import Any

STARTUP_TIMEOUT = "timed out during startup"


def reuse_driver_env_for_workers() -> None:
    """Under `uv run`, Ray rebuilds the uv environment for every worker process (slow, and fragile
    while the workspace changes); the driver's interpreter already has everything, so workers reuse
    it. Ray reads this flag when it is first imported, so call this before anything imports Ray."""
    os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")


def init_ray(attempts: int = 3, **kwargs: Any) -> Any:
    """``ray.init(**kwargs)``, started again (up to ``attempts`` times in all) when only Ray's start-up
    window was missed. Returns what ``ray.init`` returns."""
    import ray

    if attempts < 1:
        raise ValueError(f"init_ray: attempts must be >= 1, got {attempts}")
    for attempt in range(1, attempts + 1):
        try:
            return ray.init(**kwargs)
        except Exception as e:
            if STARTUP_TIMEOUT not in str(e) or attempt == attempts:
                raise
            ray.shutdown()
            print(
                f"Ray's node missed its fixed 30 s start-up window (the machine is overloaded); "
                f"starting it again ({attempt + 1}/{attempts})",
                file=sys.stderr,
                flush=True,
            )
    raise AssertionError("unreachable")
