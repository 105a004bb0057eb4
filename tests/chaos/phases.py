"""Land a ``kill -9`` inside a training phase, deterministically (no sleep-and-hope).

``phase_worker(base, phase, rank, step, marker_dir)`` subclasses the actor/rollout worker class so that
worker ``rank`` stops *inside* ``phase`` of training step ``step``, writes a marker file naming its pid,
and holds there until it is killed (or fails loudly after ``hold_s``). The test (or the soak script)
waits for the marker with ``wait_for_marker`` and then SIGKILLs the worker, or the driver.

Where each phase holds, on the real code path:

- ``generate``: in the native rollout's decode loop, at the first decode step after the prefill
  (``native_rollout.decoder_forward``, wrapped for that one call).
- ``update``: in ``update_actor``, right after the actor's first forward (a forward hook), before its
  backward and optimizer step.
- ``save``: in DCP's shard writer, after the first tensor of this rank's ``__<rank>_0.distcp`` went to disk
  (``filesystem._write_item``, wrapped for that one call): the shard on disk is truncated, ``.metadata``
  and ``checkpoint_meta.json`` are not written, the other rank waits in DCP's collective.

The class is built in a function (cloudpickle ships it by value to the Ray workers; this module is
registered by value too, so the workers need not import ``tests``).
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path

PHASES = ("generate", "update", "save")


def marker_path(marker_dir: str | os.PathLike, phase: str, step: int, rank: int) -> Path:
    return Path(marker_dir) / f"{phase}_step{step}_rank{rank}.json"


def _hold(marker: Path, hold_s: float, detail: str) -> None:
    """Write ``marker`` (atomically) and wait to be killed; raise if nobody does within ``hold_s``."""
    tmp = marker.with_suffix(".tmp")
    tmp.write_text(json.dumps({"pid": os.getpid(), "detail": detail, "at": time.time()}))
    os.replace(tmp, marker)
    deadline = time.monotonic() + hold_s
    while time.monotonic() < deadline:
        time.sleep(0.05)
    raise RuntimeError(f"chaos hook: held in {detail} for {hold_s} s and was not killed ({marker})")


@contextlib.contextmanager
def _wrap_once(module, name: str, nth: int, on_hit):
    """Replace ``module.name`` while the block runs; its ``nth`` call runs ``on_hit(args)`` first."""
    original = getattr(module, name)
    calls = [0]

    def wrapper(*args, **kwargs):
        calls[0] += 1
        if calls[0] == nth:
            on_hit(args)
        return original(*args, **kwargs)

    setattr(module, name, wrapper)
    try:
        yield
    finally:
        setattr(module, name, original)


def phase_worker(
    base: type, phase: str, rank: int, step: int, marker_dir: str, hold_s: float = 300.0
) -> type:
    """``base`` (the actor/rollout worker class) with worker ``rank`` held inside ``phase`` of ``step``."""
    import sys

    import cloudpickle
    import torch.distributed as dist
    from verl.single_controller.base.decorator import MAGIC_ATTR, register

    if phase not in PHASES:
        raise ValueError(f"phase={phase!r}; expected one of {PHASES}")
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    marker_dir = str(marker_dir)

    def _same_dispatch(method):
        attrs = getattr(getattr(base, method.__name__), MAGIC_ATTR)
        return register(
            dispatch_mode=attrs["dispatch_mode"],
            execute_mode=attrs["execute_mode"],
            blocking=attrs["blocking"],
        )(method)

    def _armed(self, phase_now: str, step_now) -> Path | None:
        if phase_now != phase or step_now is None or int(step_now) != step or dist.get_rank() != rank:
            return None
        return marker_path(marker_dir, phase, step, rank)

    class PhaseHeldWorker(base):
        @_same_dispatch
        def generate_sequences(self, prompts):
            marker = _armed(self, "generate", prompts.meta_info.get("global_steps"))
            if marker is None or prompts.meta_info.get("validate"):
                return base.generate_sequences(self, prompts)
            from verl.workers.rollout import native_rollout

            with _wrap_once(
                native_rollout,
                "decoder_forward",
                2,
                lambda _: _hold(marker, hold_s, "generate: native rollout decode step 1"),
            ):
                return base.generate_sequences(self, prompts)

        @_same_dispatch
        def update_actor(self, data):
            marker = _armed(self, "update", data.meta_info.get("global_steps"))
            if marker is None:
                return base.update_actor(self, data)
            calls = [0]

            def after_forward(_module, _args, _output):
                calls[0] += 1
                if calls[0] == 1:
                    _hold(
                        marker, hold_s, "update_actor: after the actor's first forward, before its backward"
                    )

            handle = self.actor_engine.module.register_forward_hook(after_forward)
            try:
                return base.update_actor(self, data)
            finally:
                handle.remove()

        @_same_dispatch
        def save_checkpoint(self, local_path, global_step=0, max_ckpt_to_keep=None, hdfs_path=None):
            marker = _armed(self, "save", global_step)
            if marker is None:
                return base.save_checkpoint(self, local_path, global_step, max_ckpt_to_keep, hdfs_path)
            from torch.distributed.checkpoint import filesystem

            def hold_mid_shard(args):
                args[1].flush()  # the first tensor reaches the file: a truncated shard on disk
                _hold(marker, hold_s, f"save_checkpoint: DCP shard write in {local_path}")

            with _wrap_once(filesystem, "_write_item", 2, hold_mid_shard):
                return base.save_checkpoint(self, local_path, global_step, max_ckpt_to_keep, hdfs_path)

    PhaseHeldWorker.__name__ = PhaseHeldWorker.__qualname__ = f"{base.__name__}_held_{phase}"
    return PhaseHeldWorker


def with_phase_worker(mapping: dict, phase: str, rank: int, step: int, marker_dir: str, **kw) -> dict:
    """The trainer's role -> worker class mapping with the actor/rollout class replaced by ``phase_worker``."""
    from verl.trainer.ppo.ray_trainer import Role

    key = next(r for r in (Role.ActorRolloutRef, Role.ActorRollout) if r in mapping)
    return {**mapping, key: phase_worker(mapping[key], phase, rank, step, marker_dir, **kw)}


def wait_for_marker(path: Path, timeout_s: float, alive=lambda: True) -> dict:
    """The marker's content once it exists; raise if ``alive()`` turns false or ``timeout_s`` passes."""
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if not alive():
            raise RuntimeError(f"the run ended before the worker reached {path.name}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"no worker reached {path.name} within {timeout_s} s")
        time.sleep(0.05)
    return json.loads(path.read_text())
