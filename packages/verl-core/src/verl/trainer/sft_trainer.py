"""Supervised fine-tuning entry point (FSDP2 workers on CPU or GPU through the Ray single controller).

    python -m verl.trainer.sft_trainer data.train_files=train.parquet data.val_files=val.parquet \\
        model.path=Qwen2.5-0.5B-Instruct trainer.n_gpus_per_node=8 [key=value ...]
    python -m verl.trainer.sft_trainer --config my_sft.yaml [key=value ...]

Rows hold a ``messages`` column (chat messages, single or multi-turn); the loss is on assistant tokens.
Defaults and every key: ``verl/trainer/sft/sft_trainer.yaml``. The last checkpoint's ``huggingface``
folder is printed at the end; RL starts from it with ``actor_rollout_ref.model.path=<that folder>``.
"""

from __future__ import annotations

import os
from typing import Any

# Under `uv run`, Ray would rebuild the project environment for its workers (minutes); they share ours.
# Ray reads this when it is imported, so it is set before anything imports Ray.
os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")

from omegaconf import DictConfig  # noqa: E402

from verl.trainer.sft.config import load_sft_config, validate_sft_config  # noqa: E402
from verl.trainer.sft.trainer import CONFIG_FILE, SFTTrainer  # noqa: E402
from verl.utils.ray_start import ray_init_kwargs as rl_kwargs  # noqa: E402

__all__ = ["SFTTrainer", "main", "run_sft"]


def ray_init_kwargs(config: DictConfig) -> dict[str, Any]:
    """``ray.init`` keyword arguments: the RL trainer's (``verl.utils.ray_start.ray_init_kwargs``: no dashboard,
    workers at nice 0, the user's ``runtime_env`` merged), with one torch thread per worker unless the
    driver's environment or ``runtime_env.env_vars`` sets ``OMP_NUM_THREADS``."""
    kwargs = rl_kwargs(config)
    kwargs["runtime_env"]["env_vars"].setdefault("OMP_NUM_THREADS", os.environ.get("OMP_NUM_THREADS", "1"))
    return kwargs


def init_ray(config: DictConfig) -> None:
    """Start Ray (unless running) with `ray_init_kwargs`."""
    import ray

    from verl.utils.ray_start import init_ray as start

    if ray.is_initialized():
        return
    kwargs = ray_init_kwargs(config)
    start(**kwargs)
    if not kwargs.get("address"):  # our own cluster: end its processes if this driver is SIGKILLed
        from verl.utils.reaper import start_reaper

        start_reaper()


def run_sft(config: DictConfig, worker_cls: Any = None) -> dict[str, Any]:
    """Train with a validated config; returns ``{"metrics", "checkpoint", "hf_model"}``.

    The workers are stopped at the end, so Ray's resources are free for what runs next (e.g. RL)."""
    from verl.trainer.model_builders import load_tokenizer
    from verl.utils.dataset.sft_dataset import SFTDataset

    m, d = config.model, config.data
    tokenizer = load_tokenizer(m.tokenizer_path or m.path, trust_remote_code=bool(m.trust_remote_code))
    train = SFTDataset(d.train_files, tokenizer, d, max_samples=int(d.train_max_samples))
    val = SFTDataset(d.val_files, tokenizer, d, max_samples=int(d.val_max_samples)) if d.val_files else None
    if config.trainer.worker_backend == "ray":
        init_ray(config)
    trainer = SFTTrainer(config, train, val, worker_cls=worker_cls)
    try:
        return trainer.fit()
    finally:
        trainer.shutdown()


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """The ``verl-sft`` command: ``--help``, ``--cfg job``; load, validate, train."""
    from verl.trainer.config.cli import run_cli
    from verl.trainer.sft import SFTConfig

    return run_cli(argv, prog="verl-sft", main=_train, schema=SFTConfig, load=load_sft_config, about=__doc__)


def _train(argv: list[str]) -> dict[str, Any]:
    config = load_sft_config(argv)
    validate_sft_config(config)
    result = run_sft(config)
    out = config.trainer.default_local_dir
    print(f"SFT finished: metrics and {CONFIG_FILE} in {out}; checkpoint {result['checkpoint']}", flush=True)
    if result["hf_model"]:
        print(
            f"Hugging Face model: {result['hf_model']} (RL: actor_rollout_ref.model.path={result['hf_model']})"
        )
    return result


if __name__ == "__main__":
    main()
