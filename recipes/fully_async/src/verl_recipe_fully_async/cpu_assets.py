"""What the CPU default needs and a fresh clone does not have: the task data and a warm-started model.

The task and model are core's embedded default (``verl.trainer.demo``): two-digit addition ``a+b=``
(a in 0..99, b in 0..9) with held-out test problems disjoint from training, exact-match reward; a tiny
Qwen2 (446k parameters) with a character tokenizer, warm-started by core's SFT trainer so RL has signal.
So the recipe's runs compare directly with ``python -m verl.trainer.main_ppo`` (the synchronous loop).

When the config leaves ``data.train_files`` or ``actor_rollout_ref.model.path`` unset, `asset_overrides`
makes them under ``{trainer.default_local_dir}/assets`` (reused when already there) and returns the
``key=value`` overrides that point the config at them.
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

SFT_STEPS = 180  # the demo's warm start
SFT_WORKERS = 2


def write_task(out_dir: Path) -> tuple[str, str]:
    from verl.trainer.demo import write_data

    data = write_data(out_dir)
    return data["train"], data["test"]


def warm_start_model(root: Path, steps: int = SFT_STEPS, workers: int = SFT_WORKERS) -> str:
    """The demo's tiny Qwen2, fine-tuned on the training answers with core's SFT trainer; returns the
    Hugging Face folder. ``steps=0``: the random-init model (quick runs and tests)."""
    from verl.trainer.demo import build_model, sft_args, write_data

    base = build_model(root / "base_model")
    if steps <= 0:
        return base
    from verl.trainer.sft import load_sft_config, validate_sft_config
    from verl.trainer.sft_trainer import run_sft

    data = write_data(root / "data")
    cfg = load_sft_config([*sft_args(base, data, root / "sft", steps, workers), "trainer.logger=[jsonl]"])
    validate_sft_config(cfg)
    return run_sft(cfg)["hf_model"]


def asset_overrides(cfg: DictConfig, sft_steps: int | None = None) -> list[str]:
    """``key=value`` overrides for the unset data files / model path, creating the assets on first use
    (``sft_steps``: the warm start's length, default `SFT_STEPS`)."""
    sft_steps = SFT_STEPS if sft_steps is None else int(sft_steps)
    need_data = not cfg.data.train_files
    need_model = not cfg.actor_rollout_ref.model.path
    if not (need_data or need_model):
        return []
    root = Path(cfg.trainer.default_local_dir).resolve() / "assets"
    out: list[str] = []
    if need_data:
        train, test = root / "data" / "train.parquet", root / "data" / "test.parquet"
        if not (train.is_file() and test.is_file()):
            train, test = write_task(root / "data")
        out += [f"data.train_files={train}", f"data.val_files={test}"]
    if need_model:
        marker = root / "model_path.txt"
        if marker.is_file() and Path(marker.read_text().strip(), "config.json").is_file():
            model = marker.read_text().strip()
        else:
            print(f"building the tiny model and its SFT warm start ({sft_steps} steps) in {root}", flush=True)
            model = warm_start_model(root, sft_steps)
            marker.write_text(model)
        out.append(f"actor_rollout_ref.model.path={model}")
    return out


__all__ = ["asset_overrides", "warm_start_model", "write_task"]
