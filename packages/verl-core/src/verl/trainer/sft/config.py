"""Load and validate the SFT config: the RL config loader over the SFT schema, plus SFT-specific checks."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from verl.trainer.config import ConfigError, load_config
from verl.trainer.config.validation import field_problems, fsdp_precision_problems
from verl.trainer.sft.schema import SFTConfig

SFT_DEFAULTS_YAML = Path(__file__).with_name("sft_trainer.yaml")  # generated from the schema, for users


def load_sft_config(argv: list[str] | None = None) -> DictConfig:
    """Schema defaults < ``--config FILE`` < ``key=value``; not yet validated."""
    return load_config(argv, schema=SFTConfig)


def sft_world_size(cfg: DictConfig) -> int:
    """Number of SFT workers: trainer.nnodes * trainer.n_gpus_per_node."""
    return int(cfg.trainer.nnodes) * int(cfg.trainer.n_gpus_per_node)


def validate_sft_config(cfg: DictConfig) -> None:
    """Raise one `ConfigError` listing every problem, in the user's terms; then make ``cfg`` read-only."""
    problems = field_problems(cfg)
    d, m, o, t = cfg.data, cfg.model, cfg.optim, cfg.trainer
    if not d.train_files:
        problems.append("data.train_files is required: a .parquet/.jsonl file (or a list) with a 'messages' column")
    if not m.path:
        problems.append("model.path is required: a local Hugging Face model folder")
    if t.resume_mode == "resume_path" and not t.resume_from_path:
        problems.append("trainer.resume_mode=resume_path needs trainer.resume_from_path=<.../global_step_N>")
    for key, value in (("trainer.nnodes", t.nnodes), ("trainer.n_gpus_per_node", t.n_gpus_per_node),
                       ("data.train_batch_size", d.train_batch_size), ("data.max_length", d.max_length),
                       ("data.micro_batch_size_per_gpu", d.micro_batch_size_per_gpu),
                       ("trainer.total_epochs", t.total_epochs)):
        if int(value) <= 0:
            problems.append(f"{key}={value} must be positive")
    if t.total_training_steps is not None and int(t.total_training_steps) <= 0:
        problems.append(f"trainer.total_training_steps={t.total_training_steps} must be positive or null")
    if float(o.lr) <= 0:
        problems.append(f"optim.lr={o.lr} must be positive")
    problems += fsdp_precision_problems("model.fsdp_config", m.fsdp_config, trained=True)
    if not problems:
        ws = sft_world_size(cfg)
        if t.worker_backend == "local" and ws != 1:
            problems.append(
                f"trainer.worker_backend=local runs one worker in the driver's process, but trainer.nnodes*"
                f"n_gpus_per_node={t.nnodes}*{t.n_gpus_per_node}={ws}; set both to 1 or use trainer.worker_backend=ray"
            )
        bs, mb = int(d.train_batch_size), int(d.micro_batch_size_per_gpu)
        if bs % ws:
            problems.append(
                f"data.train_batch_size={bs} conversations is not divisible by {ws} workers "
                f"(trainer.nnodes={t.nnodes} x trainer.n_gpus_per_node={t.n_gpus_per_node})"
            )
        elif (bs // ws) % mb:
            problems.append(
                f"data.train_batch_size={bs} conversations / {ws} workers = {bs // ws} per worker, which is not "
                f"divisible by data.micro_batch_size_per_gpu={mb}"
            )
        if d.val_batch_size is not None and int(d.val_batch_size) <= 0:
            problems.append(f"data.val_batch_size={d.val_batch_size} must be positive or null")
    if problems:
        raise ConfigError(problems, header="invalid SFT config")
    OmegaConf.set_readonly(cfg, True)
