"""The SFT trainer: chat data, loss on assistant tokens, FSDP workers through the single controller.

    python -m verl.trainer.sft_trainer data.train_files=train.parquet model.path=MODEL_DIR [key=value ...]
"""

from verl.trainer.sft.config import SFT_DEFAULTS_YAML, load_sft_config, sft_world_size, validate_sft_config
from verl.trainer.sft.schema import SFTConfig

__all__ = ["SFT_DEFAULTS_YAML", "SFTConfig", "load_sft_config", "sft_world_size", "validate_sft_config"]
