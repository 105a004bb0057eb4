"""Export an engine checkpoint to a Hugging Face folder that ``from_pretrained`` loads.

    python -m verl.workers.model_merger merge --local_dir ckpts/global_step_10/actor --target_dir out/

Runs in one process without ``torch.distributed``: the sharded DCP checkpoint is read whole into a
model built from the checkpoint's ``huggingface/config.json``; tokenizer files are copied alongside.
(Upstream spells it ``python -m verl.model_merger merge --backend fsdp ...``; ``--backend`` is accepted.)
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import warnings

import torch
from verl.workers.checkpoint.dcp import _TOKENIZER_FILES, DCP_DIR, HF_DIR, read_meta
from verl.workers.checkpoint.hf_model import build_model_from_config


def stored_dtype(dcp_dir: str) -> torch.dtype | None:
    """The dtype the model weights were saved in by the engine (its master weights), from the DCP
    metadata of ``dcp_dir``; None when they mix dtypes."""
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    meta = FileSystemReader(dcp_dir).read_metadata().state_dict_metadata
    dtypes = {m.properties.dtype for k, m in meta.items()
              if k.startswith("model.") and isinstance(m, TensorStorageMetadata) and m.properties.dtype.is_floating_point}
    return dtypes.pop() if len(dtypes) == 1 else None


def merge_checkpoint(local_dir: str, target_dir: str, dtype: str | None = None, lora_mode: str = "merge") -> str:
    """Write the model of the engine checkpoint ``local_dir`` as a HF folder at ``target_dir``.

    ``dtype`` (e.g. ``bfloat16``) casts the saved weights; default keeps the trained dtype.
    A LoRA checkpoint (with ``lora_adapter/``) is exported with ``lora_mode="merge"`` as the base
    model with the adapter merged in (peft's ``merge_and_unload``), or with ``"adapter"`` as the
    adapter folder alone (``adapter_config.json`` + ``adapter_model.safetensors``, for
    ``PeftModel.from_pretrained`` on the base model). Returns ``target_dir``.
    """
    import torch.distributed.checkpoint as dcp
    from verl.workers.engine.lora import ADAPTER_DIR

    if lora_mode not in ("merge", "adapter"):
        raise ValueError(f"lora_mode={lora_mode!r}; known: merge, adapter")
    meta = read_meta(local_dir)
    hf_dir = os.path.join(local_dir, HF_DIR)
    adapter_dir = os.path.join(local_dir, ADAPTER_DIR)
    is_lora = os.path.isdir(adapter_dir)
    if lora_mode == "adapter":
        if not is_lora:
            raise ValueError(f"--lora_mode adapter: the checkpoint at {local_dir!r} has no {ADAPTER_DIR}/ (not a LoRA run)")
        shutil.copytree(adapter_dir, target_dir, dirs_exist_ok=True)
        _copy_tokenizer(hf_dir, target_dir)
        return target_dir
    model = build_model_from_config(hf_dir, meta["model_type"], stored_dtype(os.path.join(local_dir, DCP_DIR)))
    if is_lora:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, adapter_dir)  # the names the DCP shards were saved under
    state = {"model": model.state_dict()}
    with warnings.catch_warnings():
        # DCP warns that it loads in one process: that is the point here
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        dcp.load(state, checkpoint_id=os.path.join(local_dir, DCP_DIR), no_dist=True)
    missing, unexpected = model.load_state_dict(state["model"], strict=False)
    # tied weights (lm_head <-> embed_tokens) may be stored once; anything else missing is an error
    tied = set(model._tied_weights_keys or {}) if model.config.tie_word_embeddings else set()
    missing = [k for k in missing if k not in tied]
    if missing or unexpected:
        raise RuntimeError(
            f"checkpoint at {local_dir!r} does not match its config: missing {missing}, unexpected {unexpected}"
        )
    if is_lora:
        model = model.merge_and_unload()
    if dtype is not None:
        from verl.workers.engine.precision import resolve_dtype

        model = model.to(resolve_dtype(dtype, "--dtype"))
    os.makedirs(target_dir, exist_ok=True)
    model.save_pretrained(target_dir)
    _copy_tokenizer(hf_dir, target_dir)
    return target_dir


def _copy_tokenizer(hf_dir: str, target_dir: str) -> None:
    for name in _TOKENIZER_FILES:
        src = os.path.join(hf_dir, name)
        if os.path.isfile(src) and not os.path.exists(os.path.join(target_dir, name)):
            shutil.copy2(src, os.path.join(target_dir, name))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m verl.workers.model_merger", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    merge = sub.add_parser("merge", help="export an engine checkpoint folder to a Hugging Face folder")
    merge.add_argument("--local_dir", required=True, help="checkpoint folder, e.g. ckpts/global_step_10/actor")
    merge.add_argument("--target_dir", required=True, help="output folder for from_pretrained")
    merge.add_argument("--backend", default="fsdp", choices=["fsdp", "fsdp2"], help="engine that wrote it")
    merge.add_argument("--dtype", default=None, help="cast weights (float32, bfloat16, float16)")
    merge.add_argument("--lora_mode", default="merge", choices=["merge", "adapter"],
                       help="LoRA checkpoints: merge the adapter into the base weights, or export the adapter alone")
    args = parser.parse_args(argv)
    out = merge_checkpoint(args.local_dir, args.target_dir, dtype=args.dtype, lora_mode=args.lora_mode)
    print(f"saved Hugging Face model to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
