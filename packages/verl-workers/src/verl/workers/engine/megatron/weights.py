"""Hugging Face <-> Megatron-Core weight names and layouts (Qwen2 and Llama families), any TP/PP split.

Per decoder layer ``i`` (Megatron holds layers ``offset .. offset + n`` of its pipeline stage as local
``decoder.layers.{i - offset}``):

==========================================  ==============================================  ========
Megatron (local spec)                       Hugging Face                                    TP split
==========================================  ==============================================  ========
``input_layernorm.weight``                  ``input_layernorm.weight``                      none
``self_attention.linear_qkv.{weight,bias}`` ``self_attn.{q,k,v}_proj.{weight,bias}``        grouped
``self_attention.linear_proj.weight``       ``self_attn.o_proj.weight``                     dim 1
``pre_mlp_layernorm.weight``                ``post_attention_layernorm.weight``             none
``mlp.linear_fc1.weight``                   ``mlp.{gate,up}_proj.weight``                   gate/up
``mlp.linear_fc2.weight``                   ``mlp.down_proj.weight``                        dim 1
==========================================  ==============================================  ========

plus ``embedding.word_embeddings.weight`` <- ``model.embed_tokens.weight`` and ``output_layer.weight``
<- ``lm_head.weight`` (vocab rows split over TP, padded to a multiple of TP with zero rows; tied models
take the embedding), ``decoder.final_layernorm.weight`` <- ``model.norm.weight``, and for the value
model ``output_layer.{weight,bias}`` <- ``score.{weight,bias}`` (replicated).

*grouped*: ``linear_qkv`` holds, for each key/value head ``g``, the query heads that share it, then
its key head, then its value head: ``cat([q.view(nkv, nq/nkv*d, h), k.view(nkv, d, h),
v.view(nkv, d, h)], 1)``; TP rank ``r`` holds a contiguous run of whole groups. *gate/up*:
``linear_fc1`` is ``cat([gate, up])`` and rank ``r`` holds ``cat([gate.chunk(tp)[r], up.chunk(tp)[r]])``.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator

import torch
from verl.workers.engine.megatron.model import ModelShape

NONE, ROW, VOCAB, QKV, FC1 = "none", "row", "vocab", "qkv", "fc1"

_LAYER = re.compile(r"^decoder\.layers\.(\d+)\.(.+)$")
_LAYER_MAP = {
    "input_layernorm.weight": (NONE, ("input_layernorm.weight",)),
    "self_attention.linear_qkv.weight": (QKV, ("self_attn.q_proj.weight", "self_attn.k_proj.weight",
                                               "self_attn.v_proj.weight")),
    "self_attention.linear_qkv.bias": (QKV, ("self_attn.q_proj.bias", "self_attn.k_proj.bias",
                                             "self_attn.v_proj.bias")),
    "self_attention.linear_proj.weight": (ROW, ("self_attn.o_proj.weight",)),
    "pre_mlp_layernorm.weight": (NONE, ("post_attention_layernorm.weight",)),
    "mlp.linear_fc1.weight": (FC1, ("mlp.gate_proj.weight", "mlp.up_proj.weight")),
    "mlp.linear_fc2.weight": (ROW, ("mlp.down_proj.weight",)),
}


def hf_names(mcore_name: str, layer_offset: int, shape: ModelShape, model_type: str) -> tuple[str, tuple[str, ...]]:
    """``(split kind, HF names)`` of a local Megatron parameter name (see module doc)."""
    m = _LAYER.match(mcore_name)
    if m:
        layer = int(m.group(1)) + layer_offset
        if m.group(2) not in _LAYER_MAP:
            raise KeyError(f"no Hugging Face name for Megatron parameter {mcore_name!r}")
        kind, names = _LAYER_MAP[m.group(2)]
        return kind, tuple(f"model.layers.{layer}.{n}" for n in names)
    if mcore_name == "embedding.word_embeddings.weight":
        return VOCAB, ("model.embed_tokens.weight",)
    if mcore_name == "decoder.final_layernorm.weight":
        return NONE, ("model.norm.weight",)
    if mcore_name in ("output_layer.weight", "output_layer.bias"):
        if model_type == "value":
            return NONE, ("score." + mcore_name.rsplit(".", 1)[1],)
        if mcore_name == "output_layer.weight":
            return VOCAB, ("model.embed_tokens.weight" if shape.tie_word_embeddings else "lm_head.weight",)
    raise KeyError(f"no Hugging Face name for Megatron parameter {mcore_name!r}")


# ------------------------------------------------------------------------------------ HF -> shard
def _grouped_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, shape: ModelShape) -> torch.Tensor:
    nkv, d = shape.num_kv_heads, shape.head_dim
    rest = q.shape[1:]  # (hidden,) for weights, () for biases
    return torch.cat([q.reshape(nkv, -1, *rest), k.reshape(nkv, d, *rest), v.reshape(nkv, d, *rest)], dim=1)


def to_shard(kind: str, hf: list[torch.Tensor], shape: ModelShape, tp_rank: int, tp_size: int) -> torch.Tensor:
    """The TP rank's shard of a Megatron parameter from its HF tensors."""
    if kind == NONE:
        return hf[0]
    if kind == ROW:
        return hf[0].chunk(tp_size, dim=1)[tp_rank]
    if kind == VOCAB:
        full = hf[0]
        pad = shape.padded_vocab_size - full.shape[0]
        if pad:
            full = torch.cat([full, full.new_zeros(pad, *full.shape[1:])])
        return full.chunk(tp_size, dim=0)[tp_rank]
    if kind == QKV:
        grouped = _grouped_qkv(*hf, shape).chunk(tp_size, dim=0)[tp_rank]
        return grouped.reshape(-1, *hf[0].shape[1:])
    if kind == FC1:
        gate, up = hf
        return torch.cat([gate.chunk(tp_size, dim=0)[tp_rank], up.chunk(tp_size, dim=0)[tp_rank]], dim=0)
    raise ValueError(f"unknown split kind {kind!r}")


# ------------------------------------------------------------------------------------ shards -> HF
def from_shards(kind: str, shards: list[torch.Tensor], shape: ModelShape) -> list[torch.Tensor]:
    """The HF tensors (in :func:`hf_names` order) from every TP rank's shard."""
    if kind == NONE:
        return [shards[0]]
    if kind == ROW:
        return [torch.cat(shards, dim=1)]
    if kind == VOCAB:
        return [torch.cat(shards, dim=0)[: shape.vocab_size]]
    if kind == QKV:
        nkv, d = shape.num_kv_heads, shape.head_dim
        rest = shards[0].shape[1:]
        grouped = torch.cat(shards, dim=0).reshape(nkv, -1, *rest)
        q_per_group = grouped.shape[1] - 2 * d
        q, k, v = grouped.split([q_per_group, d, d], dim=1)
        return [t.reshape(-1, *rest) for t in (q, k, v)]
    if kind == FC1:
        halves = [s.chunk(2, dim=0) for s in shards]
        return [torch.cat([h[0] for h in halves]), torch.cat([h[1] for h in halves])]
    raise ValueError(f"unknown split kind {kind!r}")


# ------------------------------------------------------------------------------------ checkpoints
class HFCheckpoint:
    """Reads tensors by name from a Hugging Face safetensors checkpoint (one file or an index)."""

    def __init__(self, path: str):
        index = os.path.join(path, "model.safetensors.index.json")
        single = os.path.join(path, "model.safetensors")
        if os.path.isfile(index):
            with open(index) as f:
                weight_map = json.load(f)["weight_map"]
            self._files = {name: os.path.join(path, file) for name, file in weight_map.items()}
        elif os.path.isfile(single):
            from safetensors import safe_open

            with safe_open(single, framework="pt") as f:
                self._files = {name: single for name in f.keys()}
        else:
            raise FileNotFoundError(
                f"strategy=megatron loads Hugging Face safetensors checkpoints; {path} has neither "
                f"model.safetensors nor model.safetensors.index.json"
            )
        self.path = path

    def __contains__(self, name: str) -> bool:
        return name in self._files

    def get(self, name: str) -> torch.Tensor:
        from safetensors import safe_open

        if name not in self._files:
            raise KeyError(f"{self.path} has no tensor {name!r}")
        with safe_open(self._files[name], framework="pt") as f:
            return f.get_tensor(name)


def load_hf_into_chunk(
    chunk: torch.nn.Module, ckpt: HFCheckpoint, shape: ModelShape, model_type: str, *,
    layer_offset: int, tp_rank: int, tp_size: int, init_missing_head: int | None = None,
) -> None:
    """Copy the HF checkpoint into one model chunk's parameters (this rank's shards).

    ``init_missing_head`` (a seed): a value model loaded from a causal-LM checkpoint has no ``score``;
    it is initialised as HF initialises it (normal(0, 0.02) weight, zero bias), identically on every rank.
    """
    for name, param in chunk.named_parameters():
        kind, names = hf_names(name, layer_offset, shape, model_type)
        if model_type == "value" and names[0].startswith("score.") and names[0] not in ckpt:
            if init_missing_head is None:
                raise KeyError(f"{ckpt.path} has no value head ({names[0]})")
            gen = torch.Generator().manual_seed(int(init_missing_head))
            value = torch.randn(param.shape, generator=gen) * 0.02 if name.endswith("weight") else torch.zeros(param.shape)
        else:
            value = to_shard(kind, [ckpt.get(n) for n in names], shape, tp_rank, tp_size)
        if tuple(value.shape) != tuple(param.shape):
            raise ValueError(
                f"{name}: the checkpoint gives shape {tuple(value.shape)} for this rank, the model has "
                f"{tuple(param.shape)} (from {', '.join(names)})"
            )
        with torch.no_grad():
            param.copy_(value.to(param.dtype))


def gather_hf_state_dict(
    chunks: list[torch.nn.Module], offsets: list[int], shape: ModelShape, model_type: str
) -> Iterator[tuple[str, torch.Tensor]]:
    """Every parameter under its HF name, full (CPU tensors), on every rank (collective, in step).

    TP shards are all-gathered inside each stage, then each pipeline stage broadcasts its tensors to
    the others, stage by stage, so every rank yields the whole model in layer order.
    """
    import torch.distributed as dist
    from megatron.core import parallel_state as mpu

    tp_group = mpu.get_tensor_model_parallel_group()
    tp_size = mpu.get_tensor_model_parallel_world_size()
    local: list[tuple[str, torch.Tensor]] = []
    for chunk, offset in zip(chunks, offsets):
        for name, param in chunk.named_parameters():
            kind, names = hf_names(name, offset, shape, model_type)
            if name == "output_layer.weight" and model_type == "causal_lm" and shape.tie_word_embeddings:
                continue  # the tied copy on the last stage: the first stage sends the embedding
            value = param.detach()
            if kind == NONE or tp_size == 1:
                shards = [value]
            else:
                shards = [torch.empty_like(value) for _ in range(tp_size)]
                dist.all_gather(shards, value.contiguous(), group=tp_group)
            for hf_name, tensor in zip(names, from_shards(kind, shards, shape)):
                local.append((hf_name, tensor.cpu().clone()))
    pp_size = mpu.get_pipeline_model_parallel_world_size()
    if pp_size == 1:
        yield from local
        return
    pp_group = mpu.get_pipeline_model_parallel_group()
    pp_ranks = dist.get_process_group_ranks(pp_group)
    me = mpu.get_pipeline_model_parallel_rank()
    comm_device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")
    for stage, src in enumerate(pp_ranks):
        metas = [[(n, tuple(t.shape), t.dtype) for n, t in local]] if stage == me else [None]
        dist.broadcast_object_list(metas, src=src, group=pp_group)
        mine = dict(local) if stage == me else {}
        for name, tshape, dtype in metas[0]:
            buf = mine[name].to(comm_device) if stage == me else torch.empty(tshape, dtype=dtype, device=comm_device)
            dist.broadcast(buf, src=src, group=pp_group)
            yield name, buf.cpu()
