"""Megatron-Core GPT models for Hugging Face Qwen2 / Llama checkpoints: config, layer spec, chunks.

The model is Megatron-Core's ``GPTModel`` over the *local* layer spec (plain PyTorch modules, no
Transformer Engine or apex; attention ``AttnBackend.local``), configured from the checkpoint's HF
config so that, loaded with :mod:`verl.workers.engine.megatron.weights`, it computes what the HF
model computes. The stock local norm (``WrappedTorchNorm``) refuses sequence parallelism, so the
norms here are :class:`RMSNorm`, a ``torch.nn.RMSNorm`` whose weight is marked ``sequence_parallel``
(Megatron then all-reduces its gradient over the tensor-parallel group).

A ``value`` model (the critic) replaces the LM head by :class:`ValueHead`, HF's ``score`` layer
(``hidden -> 1`` with bias, as ``*ForTokenClassification``), replicated on the tensor-parallel ranks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

#: HF ``model_type`` values whose checkpoints the name mapping understands
SUPPORTED_MODEL_TYPES = ("qwen2", "llama")


@dataclass(frozen=True)
class ModelShape:
    """What the weight mapping needs to know about the HF model."""

    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    ffn_hidden_size: int
    vocab_size: int  # the tokenizer's/HF model's vocabulary
    padded_vocab_size: int  # a multiple of the tensor-parallel size (padding rows are masked out)
    qkv_bias: bool
    tie_word_embeddings: bool
    rope_theta: float


def model_shape(hf_config: Any, tp_size: int) -> ModelShape:
    """Check that ``hf_config`` is a model the mapping supports and describe its shapes."""
    kind = getattr(hf_config, "model_type", None)
    if kind not in SUPPORTED_MODEL_TYPES:
        raise NotImplementedError(
            f"strategy=megatron maps Hugging Face checkpoints of model_type {', '.join(SUPPORTED_MODEL_TYPES)}; "
            f"this checkpoint is {kind!r}"
        )
    # transformers >= 5 keeps the RoPE settings in rope_parameters (older: rope_theta + rope_scaling)
    rope = dict(getattr(hf_config, "rope_parameters", None) or getattr(hf_config, "rope_scaling", None) or {})
    if rope.get("rope_type", rope.get("type", "default")) != "default":
        raise NotImplementedError(f"strategy=megatron: RoPE scaling {rope} is not mapped (plain RoPE only)")
    rope_theta = float(rope.get("rope_theta", getattr(hf_config, "rope_theta", 10000.0)))
    if getattr(hf_config, "use_sliding_window", False):
        raise NotImplementedError("strategy=megatron: Qwen2 sliding-window attention is not mapped")
    if kind == "llama" and (getattr(hf_config, "mlp_bias", False) or getattr(hf_config, "attention_bias", False)):
        raise NotImplementedError("strategy=megatron: Llama checkpoints with attention_bias/mlp_bias are not mapped")
    if getattr(hf_config, "hidden_act", "silu") != "silu":
        raise NotImplementedError(f"strategy=megatron: hidden_act={hf_config.hidden_act!r} is not mapped (silu)")
    heads = int(hf_config.num_attention_heads)
    kv = int(getattr(hf_config, "num_key_value_heads", None) or heads)
    hidden = int(hf_config.hidden_size)
    head_dim = int(getattr(hf_config, "head_dim", None) or hidden // heads)
    if kv % tp_size or heads % tp_size:
        raise ValueError(
            f"tensor_model_parallel_size={tp_size} must divide the model's {heads} attention heads and "
            f"{kv} key/value heads (Megatron splits whole key/value groups across ranks)"
        )
    ffn = int(hf_config.intermediate_size)
    if ffn % tp_size:
        raise ValueError(f"tensor_model_parallel_size={tp_size} must divide intermediate_size={ffn}")
    vocab = int(hf_config.vocab_size)
    return ModelShape(
        num_layers=int(hf_config.num_hidden_layers),
        hidden_size=hidden,
        num_heads=heads,
        num_kv_heads=kv,
        head_dim=head_dim,
        ffn_hidden_size=ffn,
        vocab_size=vocab,
        padded_vocab_size=-(-vocab // tp_size) * tp_size,
        qkv_bias=kind == "qwen2",
        tie_word_embeddings=bool(getattr(hf_config, "tie_word_embeddings", False)),
        rope_theta=rope_theta,
    )


def transformer_config(
    hf_config: Any, shape: ModelShape, *, parallel: Any, dtype: torch.dtype, device: torch.device,
    overrides: dict[str, Any] | None = None,
):
    """Megatron's ``TransformerConfig`` for ``hf_config`` under the parallel sizes of ``parallel``
    (a :class:`verl.workers.engine.megatron.parallel.ParallelSizes`)."""
    import torch.nn.functional as F
    from megatron.core.transformer import TransformerConfig
    from megatron.core.transformer.enums import AttnBackend

    kwargs: dict[str, Any] = dict(
        num_layers=shape.num_layers,
        hidden_size=shape.hidden_size,
        num_attention_heads=shape.num_heads,
        num_query_groups=shape.num_kv_heads,
        kv_channels=shape.head_dim,
        ffn_hidden_size=shape.ffn_hidden_size,
        layernorm_epsilon=float(hf_config.rms_norm_eps),
        normalization="RMSNorm",
        gated_linear_unit=True,
        activation_func=F.silu,
        add_bias_linear=False,
        add_qkv_bias=shape.qkv_bias,
        # the HF models train without dropout (attention_dropout=0, no hidden dropout)
        hidden_dropout=0.0,
        attention_dropout=float(getattr(hf_config, "attention_dropout", 0.0) or 0.0),
        attention_softmax_in_fp32=True,
        tensor_model_parallel_size=parallel.tp,
        pipeline_model_parallel_size=parallel.pp,
        virtual_pipeline_model_parallel_size=parallel.vpp,
        context_parallel_size=parallel.cp,
        expert_model_parallel_size=parallel.ep,
        sequence_parallel=parallel.sequence_parallel,
        params_dtype=dtype,
        pipeline_dtype=dtype,
        bf16=dtype == torch.bfloat16,
        fp16=dtype == torch.float16,
        # the fused kernels and the GPU-resident init are CUDA-only; on GPU Megatron's defaults stand
        use_cpu_initialization=device.type == "cpu",
        masked_softmax_fusion=device.type != "cpu",
        bias_activation_fusion=False,
        bias_dropout_fusion=False,
        apply_rope_fusion=False,
        gradient_accumulation_fusion=False,
        persist_layer_norm=False,
        attention_backend=AttnBackend.local,
        # micro-batches are trimmed to their longest real row, so shapes vary along the pipeline
        # (Megatron ties this flag to the MoE dispatcher; these dense models have no experts)
        variable_seq_lengths=parallel.pp > 1,
        moe_token_dispatcher_type="alltoall",
    )
    overrides = dict(overrides or {})
    kwargs.update(_pipeline_split(shape.num_layers, parallel, overrides))
    kwargs.update(overrides)
    return TransformerConfig(**kwargs)


def _pipeline_split(num_layers: int, parallel: Any, overrides: dict[str, Any]) -> dict[str, int]:
    """Layers per pipeline stage when ``pp`` does not divide them: the middle stages get
    ``num_layers // pp`` each, the first and last stages share the rest (the first one more)."""
    pp = parallel.pp
    if pp == 1 or num_layers % pp == 0 or parallel.vpp is not None or any(
        k in overrides for k in ("num_layers_in_first_pipeline_stage", "num_layers_in_last_pipeline_stage")
    ):
        return {}
    middle = num_layers // pp
    if middle == 0:
        raise ValueError(f"pipeline_model_parallel_size={pp} is more than the model's {num_layers} layers")
    rest = num_layers - middle * pp
    return {"num_layers_in_first_pipeline_stage": middle + (rest + 1) // 2,
            "num_layers_in_last_pipeline_stage": middle + rest // 2}


class RMSNorm(torch.nn.RMSNorm):
    """``torch.nn.RMSNorm`` built the way Megatron builds norms, usable with sequence parallelism."""

    def __init__(self, config: Any, hidden_size: int, eps: float = 1e-5, **_: Any):
        super().__init__(hidden_size, eps=eps, dtype=config.params_dtype)
        # with sequence parallelism each TP rank sees a slice of the tokens: the weight's gradient is
        # a partial sum that Megatron all-reduces over the TP group for parameters marked so
        self.weight.sequence_parallel = bool(config.sequence_parallel)


class ValueHead(torch.nn.Linear):
    """HF's ``score`` (hidden -> 1, with bias) in the place of ``GPTModel.output_layer``."""

    def __init__(self, config: Any, hidden_size: int):
        super().__init__(hidden_size, 1, bias=True, dtype=config.params_dtype)
        self.sequence_parallel = bool(config.sequence_parallel)
        for p in self.parameters():
            p.sequence_parallel = self.sequence_parallel

    def forward(self, hidden: torch.Tensor, weight: Any = None, runtime_gather_output: Any = None):
        from megatron.core import tensor_parallel

        values = super().forward(hidden)
        if self.sequence_parallel:
            # tokens are split over the TP ranks here; every rank needs every value
            values = tensor_parallel.gather_from_sequence_parallel_region(values, tensor_parallel_output_grad=False)
        return values, None


def layer_spec(config: Any, vp_stage: int | None):
    """The local layer spec with :class:`RMSNorm`, for the layers of this pipeline stage."""
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer.transformer_block import (
        TransformerBlockSubmodules,
        get_num_layers_to_build,
    )

    spec = get_gpt_layer_local_spec(normalization="RMSNorm")
    spec.submodules.input_layernorm = RMSNorm
    spec.submodules.pre_mlp_layernorm = RMSNorm
    n = get_num_layers_to_build(config, vp_stage=vp_stage)
    return TransformerBlockSubmodules(layer_specs=[spec] * n, layer_norm=RMSNorm)


def build_model_chunks(hf_config: Any, shape: ModelShape, config: Any, model_type: str, vpp: int | None) -> list:
    """One ``GPTModel`` per virtual pipeline stage of this rank (one chunk without interleaving)."""
    from megatron.core import parallel_state as mpu
    from megatron.core.models.gpt import GPTModel

    chunks = []
    for vp in range(vpp or 1):
        vp_stage = vp if vpp else None
        pre = mpu.is_pipeline_first_stage(ignore_virtual=False, vp_stage=vp_stage)
        post = mpu.is_pipeline_last_stage(ignore_virtual=False, vp_stage=vp_stage)
        model = GPTModel(
            config=config,
            transformer_layer_spec=layer_spec(config, vp_stage),
            vocab_size=shape.padded_vocab_size,
            max_sequence_length=int(hf_config.max_position_embeddings),
            pre_process=pre,
            post_process=post,
            parallel_output=True,
            share_embeddings_and_output_weights=shape.tie_word_embeddings and model_type == "causal_lm",
            position_embedding_type="rope",
            rotary_base=shape.rope_theta,
            vp_stage=vp_stage,
        )
        if model_type == "value" and post:
            model.output_layer = ValueHead(config, shape.hidden_size)
        chunks.append(model)
    return chunks
