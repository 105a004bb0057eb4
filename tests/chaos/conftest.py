"""The chaos suite's shared inputs: a random-init xs Qwen2 and 16 addition prompts (built once)."""

import os

os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")  # before the session's Ray starts

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def chaos_assets(tmp_path_factory):
    from verl.trainer.model_builders import MODEL_BUILDERS

    from .harness import write_task

    root = tmp_path_factory.mktemp("chaos_assets")
    return {
        "model": MODEL_BUILDERS.get("tiny_qwen2")(root / "model", size="xs"),
        "data": write_task(root / "data"),
    }


@pytest.fixture
def in_process_worker_env():
    """``trainer.worker_backend=local`` makes this pytest process a rank-0 worker (rendezvous env, gloo
    group): undo it afterwards."""
    from verl.single_controller.local import restored_process_env

    with restored_process_env():
        yield


KILL_RUN_STEPS, KILL_RUN_SAVE_FREQ = (
    6,
    2,
)  # the kill tests' runs: 6 steps (an epoch is 4), a checkpoint every 2


@pytest.fixture(scope="session")
def reference_rows(ray_cluster, chaos_assets, tmp_path_factory):
    """The kill tests' uninterrupted run: step -> metrics (timing ones dropped), computed once."""
    from .harness import rl_args, run_inprocess, train_rows

    out = tmp_path_factory.mktemp("reference") / "run"
    run_inprocess(
        rl_args(
            chaos_assets["model"],
            chaos_assets["data"],
            out,
            KILL_RUN_STEPS,
            f"trainer.save_freq={KILL_RUN_SAVE_FREQ}",
        )
    )
    rows = train_rows(out)
    assert sorted(rows) == list(range(1, KILL_RUN_STEPS + 1))
    return rows
