"""Corrupt, partial and foreign checkpoints, and a disk that fills up during a save.

The trainer runs with ``trainer.worker_backend=local`` (the same worker class and FSDP2 engine, one rank,
in this process) to keep the suite short; the checkpoints are the real DCP ones the Ray runs write.
"""

import os
import shutil
import subprocess
import uuid

import pytest

from .harness import rl_args, run_inprocess, train_rows

pytestmark = [pytest.mark.slow]


def _local(model, data, out, steps, *extra):
    return rl_args(model, data, out, steps, "trainer.worker_backend=local", *extra, workers=1)


@pytest.fixture(scope="module")
def two_checkpoints(chaos_assets, tmp_path_factory):
    """A run of 2 steps with a checkpoint after each (local backend); tests copy it before breaking it."""
    import torch.distributed as dist

    keys = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
    saved = {k: os.environ.get(k) for k in keys}
    out = tmp_path_factory.mktemp("chaos_ckpt") / "run"
    run_inprocess(_local(chaos_assets["model"], chaos_assets["data"], out, 2))
    if dist.is_initialized():
        dist.destroy_process_group()
    for k, v in saved.items():
        os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
    return out


def _copy(src, dst):
    shutil.copytree(src, dst)
    return dst


def test_truncated_shard_is_refused_naming_the_file(
    chaos_assets, two_checkpoints, tmp_path, in_process_worker_env
):
    run = _copy(two_checkpoints, tmp_path / "run")
    shard_dir = run / "global_step_2" / "actor" / "model_optim"
    shard = next(p for p in sorted(shard_dir.iterdir()) if p.suffix == ".distcp")
    size = shard.stat().st_size
    os.truncate(shard, size // 2)  # as a copy or a disk that gave out half way leaves it
    with pytest.raises(ValueError, match=rf"{shard.name} is truncated: {size // 2} bytes") as err:
        run_inprocess(_local(chaos_assets["model"], chaos_assets["data"], run, 3))
    assert str(shard) in str(err.value)
    print(f"\n[chaos] truncated shard: {type(err.value).__name__}: {err.value}")


def test_missing_tracker_is_refused_naming_the_file(chaos_assets, two_checkpoints, tmp_path):
    run = _copy(two_checkpoints, tmp_path / "run")
    os.remove(run / "latest_checkpointed_iteration.txt")
    with pytest.raises(
        FileNotFoundError, match=r"latest_checkpointed_iteration.txt is missing.*global_step_1, global_step_2"
    ):
        run_inprocess(_local(chaos_assets["model"], chaos_assets["data"], run, 3))
    assert train_rows(run).keys() == {1, 2}  # nothing was started over


def test_checkpoint_of_another_model_shape_is_refused_naming_it(
    chaos_assets, two_checkpoints, tmp_path, in_process_worker_env
):
    """The model folder at the same path was replaced by one of another shape (the path is unchanged, so
    the recorded-keys check cannot see it): the load must say which tensor does not fit, and where."""
    from verl.trainer.model_builders import MODEL_BUILDERS

    run = _copy(two_checkpoints, tmp_path / "run")
    other = MODEL_BUILDERS.get("tiny_qwen2")(
        tmp_path / "model", size="xs", hidden_size=32, intermediate_size=64
    )
    # the checkpoint was written for chaos_assets' model path: swap that folder's contents for the run
    model = _copy(chaos_assets["model"], tmp_path / "orig_model")
    shutil.rmtree(chaos_assets["model"])
    shutil.copytree(other, chaos_assets["model"])
    try:
        with pytest.raises(ValueError, match=r"cannot load checkpoint .*global_step_2/actor") as err:
            run_inprocess(_local(chaos_assets["model"], chaos_assets["data"], run, 3))
        assert "shape" in str(err.value) or "size" in str(err.value)
        print(f"\n[chaos] other model shape: {type(err.value).__name__}: {str(err.value)[:400]}")
    finally:
        shutil.rmtree(chaos_assets["model"])
        shutil.copytree(model, chaos_assets["model"])


@pytest.fixture
def tiny_disk(tmp_path):
    """A 2 MiB tmpfs: room for one checkpoint of the xs model (1.5 MB), not two."""
    path = tmp_path / "disk"
    path.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    res = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", f"chaos{uuid.uuid4().hex[:6]}", str(path)],
        capture_output=True,
        text=True,
    )
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {res.stderr.strip()}")
    yield path
    subprocess.run(["umount", "-l", str(path)], check=False)


def test_disk_full_during_save_stops_with_a_clear_error_and_keeps_the_previous(
    chaos_assets, tiny_disk, tmp_path, in_process_worker_env
):
    model, data = chaos_assets["model"], chaos_assets["data"]
    with pytest.raises(OSError) as err:
        run_inprocess(_local(model, data, tiny_disk, 3))
    msg = str(err.value)
    print(f"\n[chaos] disk full: {type(err.value).__name__}: {msg[:400]}")
    assert "No space left on device" in msg and "global_step_2" in msg
    assert (tiny_disk / "latest_checkpointed_iteration.txt").read_text() == "1"
    assert sorted(n for n in os.listdir(tiny_disk) if n.startswith(("global_step", ".tmp"))) == [
        "global_step_1"
    ]
    # The previous checkpoint is usable: resume from it (on a disk with room) and finish the run.
    run = _copy(tiny_disk, tmp_path / "moved")
    run_inprocess(_local(model, data, run, 2, "trainer.save_freq=-1"))
    assert sorted(train_rows(run)) == [1, 2]
