"""Registries for what core's entry points need from the model library without importing it.

Core must not import transformers or verl.workers (DESIGN rule 2), yet the SFT trainer needs a tokenizer
on the driver and the embedded default pipeline needs to create a tiny model. verl-workers registers both
here (``verl.workers.sft_worker``, loaded through the ``verl.plugins`` entry point), so a missing
package is an error that says ``pip install verl-workers``.

    MODEL_BUILDERS.get("tiny_qwen2")(out_dir, **sizes)    # writes a HF folder (model + tokenizer)
    TOKENIZER_LOADERS.get("hf")(path, trust_remote_code=False)
"""

from verl.utils.registry import Registry

MODEL_BUILDERS = Registry("model builder", {"tiny_qwen2": "verl-workers"})
TOKENIZER_LOADERS = Registry("tokenizer loader", {"hf": "verl-workers", "hf_processor": "verl-workers"})


def load_tokenizer(path: str, trust_remote_code: bool = False):
    """The tokenizer at ``path`` through the registered ``hf`` loader (needs verl-workers)."""
    return TOKENIZER_LOADERS.get("hf")(path, trust_remote_code=trust_remote_code)


def load_processor(path: str, trust_remote_code: bool = False):
    """The multimodal processor at ``path`` (None for text-only models), through verl-workers."""
    return TOKENIZER_LOADERS.get("hf_processor")(path, trust_remote_code=trust_remote_code)
