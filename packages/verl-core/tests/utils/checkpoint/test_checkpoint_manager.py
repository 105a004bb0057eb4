"""Atomic checkpoint dirs: a crash mid-save never leaves a complete-looking checkpoint; pruning."""

import os
import random
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from verl.utils.checkpoint import (
    TRACKER_FILE,
    atomic_checkpoint,
    find_latest_ckpt_path,
    get_rng_state,
    list_checkpoints,
    load_trainer_state,
    prune_checkpoints,
    read_latest_step,
    save_trainer_state,
    set_rng_state,
)


def _save(root, step, payload):
    with atomic_checkpoint(str(root), step) as tmp:
        save_trainer_state(tmp, {"global_step": step, "payload": payload})
        os.makedirs(os.path.join(tmp, "actor"))
        open(os.path.join(tmp, "actor", "w.txt"), "w").write(f"actor@{step}")


def test_layout_and_latest_pointer(tmp_path):
    assert find_latest_ckpt_path(str(tmp_path)) is None
    _save(tmp_path, 2, "a")
    _save(tmp_path, 4, "b")
    assert (tmp_path / TRACKER_FILE).read_text() == "4"
    latest = find_latest_ckpt_path(str(tmp_path))
    assert latest == str(tmp_path / "global_step_4")
    assert load_trainer_state(latest) == {"global_step": 4, "payload": "b"}
    assert (tmp_path / "global_step_4" / "actor" / "w.txt").read_text() == "actor@4"
    # Only the two committed dirs and the tracker exist: no temp leftovers.
    assert sorted(os.listdir(tmp_path)) == ["global_step_2", "global_step_4", TRACKER_FILE]


def test_exception_mid_save_keeps_previous(tmp_path):
    _save(tmp_path, 1, "good")
    with pytest.raises(RuntimeError, match="disk full"):
        with atomic_checkpoint(str(tmp_path), 2) as tmp:
            save_trainer_state(tmp, {"global_step": 2})
            raise RuntimeError("disk full")
    assert read_latest_step(str(tmp_path)) == 1
    assert not (tmp_path / "global_step_2").exists()
    assert sorted(os.listdir(tmp_path)) == ["global_step_1", TRACKER_FILE]
    assert load_trainer_state(find_latest_ckpt_path(str(tmp_path)))["payload"] == "good"


def test_hard_kill_mid_save_leaves_only_hidden_temp(tmp_path):
    """The process dies (os._exit, no cleanup) after writing part of checkpoint 2."""
    _save(tmp_path, 1, "good")
    script = textwrap.dedent(f"""
        import os
        from verl.utils.checkpoint import atomic_checkpoint, save_trainer_state
        with atomic_checkpoint({str(tmp_path)!r}, 2) as tmp:
            save_trainer_state(tmp, {{"global_step": 2}})
            os._exit(3)
    """)
    rc = subprocess.run([sys.executable, "-c", script]).returncode
    assert rc == 3
    names = os.listdir(tmp_path)
    assert "global_step_2" not in names and any(n.startswith(".tmp_") for n in names)
    assert find_latest_ckpt_path(str(tmp_path)) == str(tmp_path / "global_step_1")
    assert [s for s, _ in list_checkpoints(str(tmp_path))] == [1]
    # The next save sweeps the leftover.
    _save(tmp_path, 2, "new")
    assert sorted(os.listdir(tmp_path)) == ["global_step_1", "global_step_2", TRACKER_FILE]


def test_committed_but_unpointed_dir_is_replaced(tmp_path):
    """A crash between rename and tracker update: tracker still says 1; re-saving 2 replaces the dir."""
    _save(tmp_path, 1, "one")
    _save(tmp_path, 2, "stale")
    (tmp_path / TRACKER_FILE).write_text("1")
    assert find_latest_ckpt_path(str(tmp_path)).endswith("global_step_1")
    _save(tmp_path, 2, "fresh")
    assert load_trainer_state(str(tmp_path / "global_step_2"))["payload"] == "fresh"


def test_tracker_pointing_to_missing_dir_is_loud(tmp_path):
    (tmp_path / TRACKER_FILE).write_text("7")
    with pytest.raises(FileNotFoundError, match="global_step_7"):
        find_latest_ckpt_path(str(tmp_path))


def test_prune_keeps_newest_and_role_limits(tmp_path):
    for s in (1, 2, 3, 4):
        _save(tmp_path, s, s)
        os.makedirs(tmp_path / f"global_step_{s}" / "critic")
    removed = prune_checkpoints(str(tmp_path), 2, {"critic": 1})
    assert removed == [1, 2]
    assert [s for s, _ in list_checkpoints(str(tmp_path))] == [3, 4]
    assert not (tmp_path / "global_step_3" / "critic").exists()
    assert (tmp_path / "global_step_3" / "actor").exists()
    assert (tmp_path / "global_step_4" / "critic").exists()
    assert prune_checkpoints(str(tmp_path), None) == []


def test_rng_roundtrip():
    state = get_rng_state()
    expect = (random.random(), float(np.random.rand()), torch.rand(3).tolist())
    random.random(), np.random.rand(), torch.rand(5)  # move on
    set_rng_state(state)
    assert (random.random(), float(np.random.rand()), torch.rand(3).tolist()) == expect


def test_missing_tracker_with_checkpoints_is_refused_naming_the_file(tmp_path):
    """resume_mode=auto must not silently start over when only the tracker file was lost."""
    _save(tmp_path, 1, "one")
    _save(tmp_path, 2, "two")
    os.remove(tmp_path / TRACKER_FILE)
    with pytest.raises(FileNotFoundError, match=rf"{TRACKER_FILE} is missing.*global_step_1, global_step_2.*echo 2"):
        find_latest_ckpt_path(str(tmp_path))


def test_incomplete_or_missing_tracked_dir_falls_back_to_the_newest_complete(tmp_path):
    _save(tmp_path, 1, "one")
    _save(tmp_path, 2, "two")
    _save(tmp_path, 3, "three")
    os.remove(tmp_path / "global_step_3" / "trainer_state.pt")  # copied in part after the fact
    with pytest.warns(UserWarning, match=r"global_step_3 is incomplete \(no trainer_state.pt\); resuming from .*global_step_2"):
        assert find_latest_ckpt_path(str(tmp_path)) == str(tmp_path / "global_step_2")
    os.remove(tmp_path / "global_step_2" / "trainer_state.pt")
    import shutil

    shutil.rmtree(tmp_path / "global_step_3")
    with pytest.warns(UserWarning, match=r"global_step_3 does not exist; resuming from .*global_step_1"):
        assert find_latest_ckpt_path(str(tmp_path)) == str(tmp_path / "global_step_1")
    os.remove(tmp_path / "global_step_1" / "trainer_state.pt")
    with pytest.raises(FileNotFoundError, match="no complete older checkpoint"):
        find_latest_ckpt_path(str(tmp_path))
