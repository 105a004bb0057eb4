"""Shared inputs of the end-to-end tests: the built-in task's parquet files and a tiny chat model."""

import os

# Under `uv run`, Ray would rebuild the project environment for its workers; they share ours. Ray reads
# this at import time, so it is set when this conftest loads (before the session's Ray starts).
os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def task_data(tmp_path_factory):
    """The default pipeline's addition task (train/test parquet), as demo.py writes it."""
    from verl.trainer.demo import write_data

    return write_data(tmp_path_factory.mktemp("e2e_data"))


@pytest.fixture(scope="session")
def tiny_chat_model(tmp_path_factory):
    """A random-init xs tiny Qwen2 + char tokenizer (through the MODEL_BUILDERS registry)."""
    from verl.trainer.model_builders import MODEL_BUILDERS

    return MODEL_BUILDERS.get("tiny_qwen2")(tmp_path_factory.mktemp("e2e_model"), size="xs")


@pytest.fixture
def train_logged(ray_cluster):
    """``train(cfg) -> rows``: validate ``cfg``, train it through ``main_ppo``'s trainer in the tests' Ray
    session (shut down after) and return the tracker's rows (``trainer.logger`` must hold ``jsonl``)."""
    return _train_logged


def _train_logged(cfg) -> list[dict]:
    import json
    from pathlib import Path

    from verl.trainer.config import validate_config
    from verl.trainer.main_ppo import build_trainer

    validate_config(cfg)
    trainer = build_trainer(cfg)
    trainer.init_workers()
    try:
        trainer.fit()
    finally:
        trainer.shutdown()  # the tests share one Ray session
    return [json.loads(line) for line in open(Path(cfg.trainer.default_local_dir) / "metrics.jsonl")]
