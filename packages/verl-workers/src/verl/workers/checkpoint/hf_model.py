"""The Hugging Face model a checkpoint's weights are written through: built from its saved config, in
the dtype of the weights (shared by the engine's checkpoint save and the offline model merger)."""

from __future__ import annotations

from collections.abc import Mapping

import torch


def build_model_from_config(hf_dir: str, model_type: str, dtype: torch.dtype | None = None):
    """A randomly initialised model of ``hf_dir``'s config (``value``: token classifier; else causal LM).

    ``dtype``: the dtype of the weights that will be loaded into it. Without it the model takes the
    config's ``dtype``, which is the dtype the training engine *loaded* the checkpoint in
    (``model_dtype``): under mixed precision (bf16 load, fp32 master weights) that would round the
    trained fp32 weights to bf16 on export, where upstream saves the trained state dict as it is."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForTokenClassification

    config = AutoConfig.from_pretrained(hf_dir)
    kwargs = {} if dtype is None else {"dtype": dtype}
    with torch.device("cpu"):
        if model_type == "value":
            return AutoModelForTokenClassification.from_config(config, **kwargs)
        return AutoModelForCausalLM.from_config(config, **kwargs)


def state_dtype(state: Mapping[str, torch.Tensor]) -> torch.dtype | None:
    """The floating dtype of a state dict's tensors (None when they mix dtypes or hold none)."""
    dtypes = {v.dtype for v in state.values() if v.is_floating_point()}
    return dtypes.pop() if len(dtypes) == 1 else None
