"""Typed schema of the SFT trainer config (``python -m verl.trainer.sft_trainer``).

Same style as the RL config (`verl.trainer.config`): fields declared with `opt` carry every key's type,
default, choices and help; the RL loader parses ``key=value`` / ``--config FILE`` against this schema
(unknown keys are errors with a did-you-mean) and `validate_sft_config` checks it once and makes it read-only.

Sizes: ``data.train_batch_size`` counts conversations per optimizer step over all workers;
``data.micro_batch_size_per_gpu`` counts conversations per worker per forward/backward.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from verl.trainer.config import (
    FSDPEngineConfig,
    HFModelConfig,
    OptimizerConfig,
    RayKwargsConfig,
    opt,
    section,
)
from verl.trainer.config.engine import fsdp_following
from verl.trainer.config.schema import DEVICES, LOGGERS, RESUME_MODES


@dataclass
class SFTDataConfig:
    """Conversations: rows with a ``messages`` column (chat messages; the loss is on assistant tokens)."""

    train_files: Any = opt(None, "a path or a list of paths (.parquet, .jsonl, .json); required", common=True)
    val_files: Any = opt(None, "validation files (null: no validation loss)", common=True)
    messages_key: str = opt("messages", "column holding the chat messages")
    max_length: int = opt(1024, "tokens per conversation", common=True)
    truncation: str = opt("error", "conversations longer than max_length", choices=("error", "left", "right"))
    train_batch_size: int = opt(256, "conversations per optimizer step, over all workers", common=True)
    micro_batch_size_per_gpu: int = opt(4, "conversations per worker per forward/backward", common=True)
    val_batch_size: int | None = opt(None, "conversations per validation batch (null: train_batch_size)")
    shuffle: bool = opt(True, "shuffle the training conversations")
    seed: int = opt(1, "seed of the data order")
    train_max_samples: int = opt(-1, "use at most this many training rows (-1: all)")
    val_max_samples: int = opt(-1, "use at most this many validation rows (-1: all)")
    apply_chat_template_kwargs: dict[str, Any] = opt({}, "extra keyword arguments of apply_chat_template (open dict)")


@dataclass
class SFTModelConfig(HFModelConfig):
    """The model trained, and its engine."""

    strategy: str = opt("fsdp2", "training engine", choices=("fsdp2", "fsdp"))
    fsdp_config: FSDPEngineConfig = fsdp_following("model.model_dtype")


@dataclass
class SFTOptimConfig(OptimizerConfig):
    """AdamW and its schedule."""

    lr: float = opt(1e-5, "learning rate", common=True)
    lr_warmup_steps_ratio: float = opt(0.1, "warmup as a share of the total steps")
    lr_scheduler_type: str = opt("cosine", "schedule after warmup", choices=("constant", "cosine"))
    clip_grad: float = opt(1.0, "gradient-norm clip (<= 0: none)")


@dataclass
class SFTTrainerSection:
    """The driver loop: workers, logging, checkpoints."""

    device: str = opt("auto", "auto: cuda when available", choices=DEVICES, common=True)
    nnodes: int = opt(1, "nodes")
    n_gpus_per_node: int = opt(8, "workers per node (CPU workers when device is cpu)", common=True)
    worker_backend: str = opt(
        "ray", "ray: workers are Ray processes; local: one worker (nnodes * n_gpus_per_node = 1) in the driver",
        choices=("ray", "local"),
    )
    logger: list[str] = opt(["console"], "trackers", choices=LOGGERS, common=True)
    project_name: str = opt("verl_sft", "tracker project")
    experiment_name: str = opt("sft", "tracker run name")
    default_local_dir: str = opt(
        "checkpoints/${trainer.project_name}/${trainer.experiment_name}", "output directory: config, metrics, checkpoints", common=True
    )
    total_epochs: int = opt(1, "passes over the training conversations", common=True)
    total_training_steps: int | None = opt(None, "stop after this many steps (null: epochs x batches)")
    save_freq: int = opt(-1, "steps between checkpoints (<= 0: only the final one)")
    test_freq: int = opt(-1, "steps between validations (<= 0: only after the last step)")
    seed: int = opt(1, "seed of the driver and every worker (seed + rank)")
    resume_mode: str = opt("auto", "resume from the newest checkpoint, never, or resume_from_path", choices=RESUME_MODES)
    resume_from_path: str | None = opt(None, "checkpoint directory (global_step_N) for resume_mode=resume_path")
    max_ckpt_to_keep: int | None = opt(None, "keep the newest N checkpoints (null: all)")
    save_hf_model: bool = opt(True, "write global_step_N/huggingface (model + tokenizer) with each checkpoint")
    progress_bar: bool = opt(True, "show a progress bar")


@dataclass
class SFTConfig:
    """Root of the config that ``python -m verl.trainer.sft_trainer`` reads."""

    data: SFTDataConfig = section(SFTDataConfig)
    model: SFTModelConfig = section(SFTModelConfig)
    optim: SFTOptimConfig = section(SFTOptimConfig)
    trainer: SFTTrainerSection = section(SFTTrainerSection)
    ray_kwargs: RayKwargsConfig = section(RayKwargsConfig)
