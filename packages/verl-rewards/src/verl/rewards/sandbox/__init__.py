"""Code sandboxes behind one interface, chosen by ``reward.sandbox.name``.

``local`` (default, no server; see `verl.rewards.sandbox.local`), ``sandbox_fusion`` (HTTP client of
a SandboxFusion server) and ``e2b`` (E2B cloud sandboxes; needs ``verl-rewards[e2b]``). All return a
`RunResult`.
"""

from __future__ import annotations

import threading
from typing import Any

from verl.rewards.sandbox.base import RunResult, Sandbox
from verl.utils.registry import Registry

SANDBOXES: Registry[type[Sandbox]] = Registry("sandbox")

__all__ = ["SANDBOXES", "RunResult", "Sandbox", "get_sandbox"]

_instances: dict[tuple, Sandbox] = {}
_lock = threading.Lock()


def _register_builtin() -> None:
    from verl.rewards.sandbox.e2b import E2BSandbox
    from verl.rewards.sandbox.fusion import SandboxFusionSandbox
    from verl.rewards.sandbox.local import LocalSandbox

    for name, cls in (("local", LocalSandbox), ("sandbox_fusion", SandboxFusionSandbox), ("e2b", E2BSandbox)):
        SANDBOXES.register(name, cls)


_register_builtin()


def get_sandbox(name: str = "local", **kwargs: Any) -> Sandbox:
    """The process-wide sandbox instance for (name, kwargs): one concurrency limit per configuration."""
    key = (name, tuple(sorted((k, repr(v)) for k, v in kwargs.items())))
    with _lock:
        if key not in _instances:
            _instances[key] = SANDBOXES.get(name)(**kwargs)
        return _instances[key]
