"""Typed schema of the SFT trainer config (``python -m verl.trainer.sft_trainer``).

Same style as the RL config (`verl.trainer.config`): dataclasses give every key its type and default,
``sft_trainer.yaml`` beside this file writes the same defaults out (a test keeps them identical), the RL
loader parses ``key=value`` / ``--config FILE`` against this schema (unknown keys are errors with a
did-you-mean) and `validate_sft_config` checks it once and makes it read-only.

Sizes: ``data.train_batch_size`` counts conversations per optimizer step over all workers;
``data.micro_batch_size_per_gpu`` counts conversations per worker per forward/backward.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from verl.trainer.config.schema import FSDPConfig, ModelConfig, OptimConfig, RayKwargsConfig, _fsdp_following


@dataclass
class SFTDataConfig:
    train_files: Any = None  # str or list of str (parquet / jsonl / json), rows with a `messages` column
    val_files: Any = None
    messages_key: str = "messages"
    max_length: int = 1024  # tokens per conversation
    truncation: str = "error"  # error | left | right
    train_batch_size: int = 256  # conversations per optimizer step (all workers)
    micro_batch_size_per_gpu: int = 4  # conversations per worker per forward/backward
    val_batch_size: int | None = None  # None: train_batch_size
    shuffle: bool = True
    seed: int = 1
    train_max_samples: int = -1
    val_max_samples: int = -1
    apply_chat_template_kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass
class SFTModelConfig(ModelConfig):
    strategy: str = "fsdp2"  # a training engine in verl.registries.TRAINING_ENGINES
    fsdp_config: FSDPConfig = _fsdp_following("model.model_dtype")


@dataclass
class SFTOptimConfig(OptimConfig):
    lr: float = 1e-5
    lr_warmup_steps_ratio: float = 0.1
    lr_scheduler_type: str = "cosine"
    clip_grad: float = 1.0  # gradient-norm clip (<= 0: none)


@dataclass
class SFTTrainerSection:
    device: str = "auto"  # auto | cpu | cuda
    nnodes: int = 1
    n_gpus_per_node: int = 8  # workers per node (per CPU node when device is cpu)
    # ray: worker processes under the Ray single controller; local: the one worker in the driver's process
    worker_backend: str = "ray"
    logger: list[str] = field(default_factory=lambda: ["console"])
    project_name: str = "verl_sft"
    experiment_name: str = "sft"
    default_local_dir: str = "checkpoints/${trainer.project_name}/${trainer.experiment_name}"
    total_epochs: int = 1
    total_training_steps: int | None = None  # None: total_epochs x batches per epoch
    save_freq: int = -1  # steps between checkpoints (<= 0: only the final one)
    test_freq: int = -1  # steps between validations (<= 0: only after the last step)
    seed: int = 1
    resume_mode: str = "auto"  # auto | disable | resume_path
    resume_from_path: str | None = None
    max_ckpt_to_keep: int | None = None
    save_hf_model: bool = True  # write global_step_N/huggingface (model + tokenizer) with each checkpoint
    progress_bar: bool = True


@dataclass
class SFTConfig:
    """Root of the config that ``python -m verl.trainer.sft_trainer`` reads."""

    data: SFTDataConfig = field(default_factory=SFTDataConfig)
    model: SFTModelConfig = field(default_factory=SFTModelConfig)
    optim: SFTOptimConfig = field(default_factory=SFTOptimConfig)
    trainer: SFTTrainerSection = field(default_factory=SFTTrainerSection)
    ray_kwargs: RayKwargsConfig = field(default_factory=RayKwargsConfig)
