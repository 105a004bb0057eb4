"""Checkpoint directory bookkeeping shared by the trainer and the workers.

Layout under ``trainer.default_local_dir``::

    global_step_{N}/trainer_state.pt     the driver's state (step, data position, RNG, KL controller)
    global_step_{N}/actor/, critic/      filled by the workers' ``save_checkpoint(local_path, ...)``
    latest_checkpointed_iteration.txt    the step of the newest complete checkpoint

Writes are atomic: everything goes into a hidden temporary directory, every file is fsynced, the
directory is renamed to ``global_step_{N}`` and only then is the latest-pointer file replaced
(write + fsync + ``os.replace``). A crash at any point leaves either the old checkpoint as latest or
the new one complete; a half-written directory never carries a ``global_step_`` name.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import warnings
from collections.abc import Iterator

from verl.utils.checkpoint.trainer_state import TRAINER_STATE_FILE

TRACKER_FILE = "latest_checkpointed_iteration.txt"
STEP_DIR_PREFIX = "global_step_"
_STEP_DIR_RE = re.compile(r"^global_step_(\d+)$")
_TMP_PREFIX = ".tmp_"  # in-progress saves and in-progress deletions: never mistaken for a checkpoint


def get_checkpoint_tracker_filename(root_path: str) -> str:
    """Path of the file holding the newest complete step (upstream name)."""
    return os.path.join(root_path, TRACKER_FILE)


def checkpoint_path(root_path: str, step: int) -> str:
    return os.path.join(root_path, f"{STEP_DIR_PREFIX}{step}")


def read_latest_step(root_path: str) -> int | None:
    """The step recorded in the tracker file, or None when there is none."""
    tracker = get_checkpoint_tracker_filename(root_path)
    if not os.path.exists(tracker):
        return None
    text = open(tracker, encoding="utf-8").read().strip()
    if not text.isdigit():
        raise ValueError(f"checkpoint tracker {tracker} holds {text!r}; expected a step number")
    return int(text)


def is_complete_checkpoint_dir(path: str) -> bool:
    """A committed step dir holds the driver's ``trainer_state.pt`` (written last, before the commit)."""
    return os.path.isfile(os.path.join(path, TRAINER_STATE_FILE))


def find_latest_ckpt_path(root_path: str) -> str | None:
    """Directory of the newest complete checkpoint under ``root_path``, or None when there is none.

    The tracker names it: a ``global_step_N`` dir committed by a save that crashed before updating the
    tracker is ignored (the run redoes that step). When the dir the tracker names is gone or incomplete
    (no ``trainer_state.pt``: deleted or copied in part after the fact), the newest complete older one is
    used, with a warning naming what was skipped. Errors, since silently starting over would discard
    training: the tracker names a dir and no complete one is left, or the tracker file is missing while
    complete checkpoints exist.
    """
    step = read_latest_step(root_path)
    tracker = get_checkpoint_tracker_filename(root_path)
    complete = [(s, p) for s, p in list_checkpoints(root_path) if is_complete_checkpoint_dir(p)]
    if step is None:
        if complete:
            raise FileNotFoundError(
                f"{tracker} is missing, but {root_path} holds checkpoints "
                f"{', '.join(os.path.basename(p) for _, p in complete)}; write the step to resume from into "
                f"it (e.g. `echo {complete[-1][0]} > {tracker}`), or set trainer.resume_mode=resume_path "
                f"trainer.resume_from_path={complete[-1][1]}, or start over with trainer.resume_mode=disable"
            )
        return None
    path = checkpoint_path(root_path, step)
    if os.path.isdir(path) and is_complete_checkpoint_dir(path):
        return path
    why = "does not exist" if not os.path.isdir(path) else f"is incomplete (no {TRAINER_STATE_FILE})"
    older = [p for s, p in complete if s < step]
    if not older:
        raise FileNotFoundError(
            f"{tracker} says step {step}, but {path} {why} and no complete older checkpoint is left; "
            f"restore it, point trainer.resume_from_path at another global_step_* dir, or set "
            f"trainer.resume_mode=disable"
        )
    warnings.warn(f"{tracker} says step {step}, but {path} {why}; resuming from {older[-1]}", stacklevel=2)
    return older[-1]


def list_checkpoints(root_path: str) -> list[tuple[int, str]]:
    """Committed ``global_step_N`` dirs under ``root_path`` as sorted ``(step, path)`` pairs."""
    if not os.path.isdir(root_path):
        return []
    out = []
    for name in os.listdir(root_path):
        m = _STEP_DIR_RE.match(name)
        if m and os.path.isdir(os.path.join(root_path, name)):
            out.append((int(m.group(1)), os.path.join(root_path, name)))
    return sorted(out)


def _fsync_path(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(path: str) -> None:
    """fsync every file and directory under ``path`` (directories so that new entries are durable)."""
    for dirpath, _dirnames, filenames in os.walk(path):
        for f in filenames:
            _fsync_path(os.path.join(dirpath, f))
        _fsync_path(dirpath)


def atomic_write_text(path: str, text: str) -> None:
    """Replace ``path`` with ``text`` so a reader sees the old or the new content, never a mix."""
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_path(os.path.dirname(os.path.abspath(path)))


def _remove_dir(path: str) -> None:
    """Delete a directory by first renaming it to a hidden temp name, so a half-deleted checkpoint
    never keeps its ``global_step_`` name."""
    parent, name = os.path.split(os.path.abspath(path))
    doomed = os.path.join(parent, f"{_TMP_PREFIX}del_{name}_{os.getpid()}")
    os.replace(path, doomed)
    shutil.rmtree(doomed, ignore_errors=True)


def clean_stale_temp_dirs(root_path: str) -> list[str]:
    """Remove leftovers of saves/deletions that crashed; returns what was removed."""
    removed = []
    if os.path.isdir(root_path):
        for name in os.listdir(root_path):
            if name.startswith(_TMP_PREFIX):
                shutil.rmtree(os.path.join(root_path, name), ignore_errors=True)
                removed.append(name)
    return removed


@contextlib.contextmanager
def atomic_checkpoint(root_path: str, step: int) -> Iterator[str]:
    """Yield a temporary directory to fill with checkpoint ``step``; commit it on a clean exit.

    On exit without error: fsync the tree, rename it to ``global_step_{step}`` (replacing an older
    dir of that name), then point the tracker at ``step``. On an exception: delete the temporary
    directory, leave everything else as it was, and re-raise.
    """
    os.makedirs(root_path, exist_ok=True)
    clean_stale_temp_dirs(root_path)
    tmp = os.path.join(root_path, f"{_TMP_PREFIX}{STEP_DIR_PREFIX}{step}_{os.getpid()}")
    os.makedirs(tmp)
    try:
        yield tmp
        fsync_tree(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    final = checkpoint_path(root_path, step)
    if os.path.exists(final):  # e.g. a dir committed by a save that crashed before the tracker update
        _remove_dir(final)
    os.replace(tmp, final)
    _fsync_path(root_path)
    atomic_write_text(get_checkpoint_tracker_filename(root_path), str(step))


def prune_checkpoints(root_path: str, max_to_keep: int | None, role_limits: dict[str, int | None] | None = None) -> list[int]:
    """Delete old checkpoints, never the one the tracker points to.

    Whole ``global_step_N`` dirs beyond the newest ``max_to_keep`` are removed (None or <= 0 keeps
    all). ``role_limits`` (e.g. ``{"critic": 1}``) additionally drops that role's subdir from all but
    the newest ``limit`` checkpoints. Returns the steps whose whole dir was removed.
    """
    ckpts = list_checkpoints(root_path)
    latest = read_latest_step(root_path)
    removed = []
    if max_to_keep is not None and max_to_keep > 0:
        for step, path in ckpts[:-max_to_keep]:
            if step != latest:
                _remove_dir(path)
                removed.append(step)
    for role, limit in (role_limits or {}).items():
        if limit is None or limit <= 0:
            continue
        for step, path in list_checkpoints(root_path)[:-limit]:
            sub = os.path.join(path, role)
            if step != latest and os.path.isdir(sub):
                _remove_dir(sub)
    return removed
