"""The SFT worker role, and what core's SFT trainer and default pipeline need from this package.

``SFTWorker`` (``WORKER_CLASSES["sft"]``) trains a causal LM with cross-entropy on the tokens a loss mask
selects, on a training engine from ``TRAINING_ENGINES`` (``model.strategy``: ``fsdp2`` or ``fsdp``), one
worker per device in a Ray worker group driven by ``verl.trainer.sft_trainer``. Each batch row is one
right-padded conversation: ``input_ids``, ``attention_mask``, ``position_ids``, ``loss_mask`` [B, L].

Also registered here: ``MODEL_BUILDERS["tiny_qwen2"]`` (`build_tiny_chat_model`) and
``TOKENIZER_LOADERS["hf"]`` (`verl.workers.tokenizer.hf_tokenizer`) and ``TOKENIZER_LOADERS["hf_processor"]``
(`verl.workers.tokenizer.hf_processor`), so core never imports transformers.
"""

from __future__ import annotations

import os
from typing import Any

import torch
import torch.distributed as dist
from verl import DataProto
from verl.registries import WORKER_CLASSES
from verl.single_controller.base.decorator import Dispatch, register
from verl.single_controller.base.worker import Worker
from verl.trainer.model_builders import MODEL_BUILDERS, TOKENIZER_LOADERS
from verl.workers.tokenizer import hf_processor, hf_tokenizer

_SEQ_KEYS = ("input_ids", "attention_mask", "position_ids", "loss_mask")


def shifted_micro_batches(batch: Any, micro_batch_size: int) -> list[dict[str, torch.Tensor]]:
    """Split a right-padded batch into micro-batches in the engine's format.

    The engine scores ``responses`` against the positions before them; with ``responses = input_ids[:, 1:]``
    it returns the log-prob of every token given its prefix, and ``loss_mask[:, 1:]`` selects the targets.
    Columns past the longest row are cut first (padding costs compute, not correctness).
    """
    length = max(int(batch["attention_mask"].sum(-1).max()), 2)
    out = []
    rows = batch["input_ids"].shape[0]
    for i in range(0, rows, micro_batch_size):
        mb = {k: batch[k][i : i + micro_batch_size, :length] for k in _SEQ_KEYS}
        mb["responses"] = mb["input_ids"][:, 1:]
        mb["target_mask"] = mb["loss_mask"][:, 1:].to(torch.float32)
        out.append(mb)
    return out


class SFTWorker(Worker):
    """Supervised fine-tuning on one data-parallel rank. ``config`` is the whole SFT config (read only)."""

    def __init__(
        self, config: Any, total_training_steps: int | None = None, device: str | None = None, **_: Any
    ):
        super().__init__()
        self.config = config
        self.total_training_steps = total_training_steps
        # resolved by the trainer from trainer.device; None: what this process sees
        self.device_name = device if device is not None else config.trainer.device
        self.engine = None

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self) -> None:
        """Join torch.distributed and build the engine (model, AdamW, LR schedule)."""
        from verl.workers.engine import build_engine
        from verl.workers.worker_setup import init_distributed

        cfg = self.config
        init_distributed(self.device_name, int(cfg.trainer.seed))
        self.engine = build_engine(
            cfg.model.strategy,
            model_config=cfg.model,
            engine_config=cfg.model.fsdp_config,
            optim_config=cfg.optim,
            model_type="causal_lm",
            grad_clip=float(cfg.optim.clip_grad),
            total_training_steps=self.total_training_steps,
        )

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def train_batch(self, data: DataProto) -> DataProto:
        """One optimizer step on this rank's rows.

        ``meta_info["global_tokens"]`` is the number of target tokens in the whole (all-rank) batch, so
        the summed per-rank losses equal the token-mean cross-entropy of the global batch.
        Returns ``meta_info["metrics"]`` (the driver gathers one value per rank): ``train/loss`` (this rank's share), ``train/grad_norm``, ``train/lr``.
        """
        n_tokens = float(data.meta_info["global_tokens"])
        micro = shifted_micro_batches(data.batch, int(self.config.data.micro_batch_size_per_gpu))

        def loss_fn(out: dict[str, torch.Tensor], mb: Any) -> tuple[torch.Tensor, dict]:
            mask = mb["target_mask"].to(out["log_probs"].device)
            return -(out["log_probs"] * mask).sum() / n_tokens, {}

        results = self.engine.forward_backward(micro, loss_fn)
        lr = self.engine.get_lr()
        grad_norm = self.engine.optimizer_step()
        self.engine.lr_scheduler_step()
        loss = sum(r["loss"] for r in results)
        return DataProto(meta_info={"metrics": {"train/loss": loss, "train/grad_norm": grad_norm, "train/lr": lr}})

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def eval_batch(self, data: DataProto) -> DataProto:
        """Summed negative log-likelihood and target-token count of this rank's rows (no update)."""
        micro = shifted_micro_batches(data.batch, int(self.config.data.micro_batch_size_per_gpu))
        # Every micro-batch has the same width (cut once for the batch), so rows line up with infer's output.
        log_probs = self.engine.infer(micro)["log_probs"]
        target = torch.cat([mb["target_mask"] for mb in micro], dim=0)
        nll = float(-(log_probs * target).sum())
        tokens = float(target.sum())
        return DataProto(meta_info={"metrics": {"val/nll_sum": nll, "val/tokens": tokens}})

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def save_checkpoint(self, local_path: str, global_step: int = 0) -> None:
        """Model, optimizer, LR schedule and RNG (sharded, DCP) to ``local_path`` (collective)."""
        self.engine.save_checkpoint(local_path, global_step=global_step)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def load_checkpoint(self, local_path: str) -> None:
        self.engine.load_checkpoint(local_path)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def save_hf_model(self, path: str) -> str:
        """Write a Hugging Face folder (weights, config, generation config, tokenizer) that
        ``from_pretrained(path)`` and RL's ``actor_rollout_ref.model.path`` load (collective)."""
        state = self.engine.hf_state_dict()  # with LoRA: adapters merged in
        if dist.get_rank() == 0:
            save_hf_folder(state, self.engine.hf_config, self.config.model, path)
        dist.barrier()
        return path


def save_hf_folder(state: dict[str, torch.Tensor], hf_config: Any, model_config: Any, path: str) -> None:
    """Build the model class of ``hf_config``, load ``state`` and save it with the tokenizer of the source."""
    import copy

    from transformers import AutoModelForCausalLM, GenerationConfig
    from verl.workers.checkpoint.hf_model import state_dtype

    # Built in the dtype of the trained weights (fp32 masters under mixed precision), as upstream's
    # save_pretrained(state_dict=...) writes them: hf_config's dtype is model_dtype, the dtype the
    # checkpoint was *loaded* in, and a bf16 model here would round the trained weights. A copy:
    # from_config sets the dtype on the config it is given, and hf_config is the engine's.
    dtype = state_dtype(state)
    model = AutoModelForCausalLM.from_config(copy.deepcopy(hf_config), **({"dtype": dtype} if dtype else {}))
    missing, unexpected = model.load_state_dict(state, strict=False)
    tied = set(model._tied_weights_keys or {}) if hf_config.tie_word_embeddings else set()
    missing = [k for k in missing if k not in tied]
    if missing or unexpected:
        raise RuntimeError(f"trained weights do not match {type(model).__name__}: missing {missing}, unexpected {unexpected}")
    src = model_config.path
    if os.path.isfile(os.path.join(src, "generation_config.json")):
        model.generation_config = GenerationConfig.from_pretrained(src)
    os.makedirs(path, exist_ok=True)
    model.save_pretrained(path)
    tok_src = model_config.tokenizer_path or src
    hf_tokenizer(tok_src, trust_remote_code=bool(model_config.trust_remote_code)).save_pretrained(path)


def build_tiny_chat_model(out_dir: str | os.PathLike, size: str = "xs", seed: int = 0, **overrides: Any) -> str:
    """A random-init tiny Qwen2 chat model with the character tokenizer, saved to ``out_dir``.

    ``overrides`` set config fields over the ``size`` preset (``hidden_size``, ``num_hidden_layers``,
    ``num_attention_heads``, ``num_key_value_heads``, ``intermediate_size``, ...). Generation stops at
    ``<|im_end|>`` as well as ``<|endoftext|>``, as Qwen chat models do, so a model fine-tuned on chat
    turns ends its reply where the template ends it. Returns ``out_dir``.
    """
    from transformers import Qwen2Config, Qwen2ForCausalLM
    from verl.workers.tiny import IM_END, build_char_tokenizer, tiny_qwen2_config

    out = os.fspath(out_dir)
    tok = build_char_tokenizer(out)
    base = tiny_qwen2_config(size, vocab_size=len(tok)).to_dict()
    base.pop("head_dim", None)
    base.pop("layer_types", None)  # derived from num_hidden_layers
    unknown = [k for k in overrides if k not in base]
    if unknown:
        raise ValueError(f"unknown tiny model config keys {unknown}; known: {sorted(base)}")
    config = Qwen2Config(**{**base, **overrides})
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    model.generation_config.pad_token_id = tok.pad_token_id
    model.generation_config.eos_token_id = [tok.eos_token_id, tok.convert_tokens_to_ids(IM_END)]
    model.save_pretrained(out)
    return out


WORKER_CLASSES.register("sft", SFTWorker)
MODEL_BUILDERS.register("tiny_qwen2", build_tiny_chat_model)
TOKENIZER_LOADERS.register("hf", hf_tokenizer)
# the multimodal processor of a vision-language model path (None for text-only models)
TOKENIZER_LOADERS.register("hf_processor", hf_processor)
