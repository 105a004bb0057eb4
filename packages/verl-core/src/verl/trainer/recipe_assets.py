"""What a recipe's CPU default makes for itself: the task files and a warm-started tiny model, built once
under ``{trainer.default_local_dir}/assets`` and reused by later runs (``Recipe(built_in=...)``)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["BuiltIn", "assets_root", "task_and_model"]


@dataclass(frozen=True)
class BuiltIn:
    """What a recipe's ``built_in`` gets besides the config.

    Attributes:
        unset: the keys of ``Recipe.made`` the config leaves unset.
        stack: the run's exit stack: a service the run needs (a simulated user's server) is entered on it
            and stops when training ends.
        root: ``{trainer.default_local_dir}/assets`` (absolute), where the assets go.
    """

    unset: list[str]
    stack: ExitStack
    root: Path


def assets_root(cfg: Any) -> Path:
    """``{trainer.default_local_dir}/assets``, absolute (Ray workers may run in another directory)."""
    return Path(cfg.trainer.default_local_dir).resolve() / "assets"


def task_and_model(
    cfg: Any,
    root: Path,
    write_task: Callable[[Path], tuple[Any, Any]],
    build_model: Callable[[Path, Path], Any],
    model_dir: str = "tiny_qwen2_warm",
    done: str = "config.json",
) -> list[str]:
    """``key=value`` overrides for an unset ``data.train_files`` / ``actor_rollout_ref.model.path``.

    The task: ``write_task(root / "data") -> (train, test)`` parquet files, written when
    ``root/data/{train,test}.parquet`` are not there yet (``data.val_files`` points at the test split).
    The model: ``build_model(root / model_dir, train_file)``, run when ``root/model_dir/done`` is missing
    (``done`` is the file a build writes last, so a build cut short is redone).
    """
    need_data = not cfg.data.train_files
    need_model = not cfg.actor_rollout_ref.model.path
    if not (need_data or need_model):
        return []
    train, test = root / "data" / "train.parquet", root / "data" / "test.parquet"
    if not (train.is_file() and test.is_file()):
        train, test = write_task(root / "data")
    out = [f"data.train_files={train}", f"data.val_files={test}"] if need_data else []
    if need_model:
        model = root / model_dir
        if not (model / done).is_file():
            print(f"building the tiny model and its warm start in {model}", flush=True)
            build_model(model, Path(train))
        out.append(f"actor_rollout_ref.model.path={model}")
    return out
