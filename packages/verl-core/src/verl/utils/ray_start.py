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

from omegaconf import DictConfig, OmegaConf

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


def ray_init_kwargs(config: DictConfig) -> dict[str, Any]:
    """``ray_kwargs.ray_init`` with defaults: no dashboard, no tokenizer thread pools. Each worker's
    torch threads follow the CPUs it reserves (set where the worker group starts it), so no
    ``OMP_NUM_THREADS`` is set here; one in ``ray_kwargs.ray_init.runtime_env.env_vars`` still wins. The
    workers run at nice 0 instead of Ray's 15 (``cpu_threads.worker_niceness_env``) unless the user set
    ``RAY_worker_niceness`` here or in the driver's environment."""
    kwargs = {
        k: v
        for k, v in OmegaConf.to_container(config.ray_kwargs.ray_init, resolve=True).items()
        if v is not None
    }
    kwargs.setdefault("include_dashboard", False)
    runtime_env = dict(kwargs.get("runtime_env") or {})
    env_vars = {
        "TOKENIZERS_PARALLELISM": "false",
        # Ray takes strings only; an override like env_vars.OMP_NUM_THREADS=3 arrives as an int
        **{k: str(v) for k, v in dict(runtime_env.get("env_vars") or {}).items()},
    }
    from verl.utils.cpu_threads import worker_niceness_env

    if "RAY_worker_niceness" not in env_vars:
        # workers at nice 0, not Ray's 15 (verl.utils.cpu_threads.worker_niceness_env); the user's wins
        env_vars.update(worker_niceness_env())
    runtime_env["env_vars"] = env_vars
    kwargs["runtime_env"] = runtime_env
    return kwargs
