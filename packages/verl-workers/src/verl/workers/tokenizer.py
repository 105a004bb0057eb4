"""Tokenizer loading for the trainer entry points (upstream: ``verl.utils.hf_tokenizer``).

Core's ``main_ppo`` cannot import transformers (DESIGN rule 2), so it gets its tokenizer through
this module, which verl-workers' plugin makes available.
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Any


def hf_tokenizer(name_or_path: str | os.PathLike, correct_pad_token: bool = True, **kwargs: Any):
    """Load a Hugging Face tokenizer from a local folder (``AutoTokenizer.from_pretrained``).

    With ``correct_pad_token`` a tokenizer without a pad token gets its EOS token as pad (decoder-only
    models often ship that way), with a warning, because padding is needed to batch prompts.
    ``kwargs`` go to ``from_pretrained`` (e.g. ``trust_remote_code=True``).
    """
    from transformers import AutoTokenizer

    path = os.fspath(name_or_path)
    tokenizer = AutoTokenizer.from_pretrained(path, **kwargs)
    if correct_pad_token and tokenizer.pad_token_id is None:
        if tokenizer.eos_token is None:
            raise ValueError(f"tokenizer at {path!r} has neither a pad token nor an EOS token to pad with")
        warnings.warn(
            f"tokenizer at {path!r} has no pad token; using its EOS token {tokenizer.eos_token!r}",
            stacklevel=2,
        )
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


#: files one of which a local folder holds when it has a multimodal processor: the processor's own config
#: or its image / video processor's (a vision-language processor cannot be built without the latter)
_PROCESSOR_FILES = ("processor_config.json", "preprocessor_config.json", "video_preprocessor_config.json")


def _has_no_processor(path: str) -> bool:
    """True when ``path`` is a local model folder that certainly has no multimodal processor: none of
    ``_PROCESSOR_FILES`` and no ``processor_class`` in its tokenizer config. Lets the driver of a
    text-only run skip ``AutoProcessor``, whose import alone loads transformers' processing, model and
    torch compile stacks (~100 MiB the driver would hold for nothing)."""
    folder = Path(path)
    if not folder.is_dir() or any((folder / name).exists() for name in _PROCESSOR_FILES):
        return False
    tokenizer_config = folder / "tokenizer_config.json"
    try:
        return "processor_class" not in json.loads(tokenizer_config.read_text())
    except (OSError, ValueError):
        return not tokenizer_config.exists()


def hf_processor(name_or_path: str | os.PathLike, **kwargs: Any):
    """A multimodal processor for the path, or None when the model has none (text-only models)."""
    if _has_no_processor(os.fspath(name_or_path)):
        return None
    from transformers import AutoProcessor
    from verl.workers.tiny_vlm import register_image_only_processor

    # processors saved by verl.workers.tiny_vlm (Qwen2-VL without a video processor) load by name
    register_image_only_processor()
    try:
        processor = AutoProcessor.from_pretrained(os.fspath(name_or_path), **kwargs)
    except (OSError, ValueError, KeyError):
        return None
    # Text-only models resolve AutoProcessor to their tokenizer: that is "no processor" here.
    return None if "Processor" not in type(processor).__name__ else processor
