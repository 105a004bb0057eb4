"""HF <-> Megatron weight layouts (no Megatron import): the documented layouts on a hand-sized example,
and HF -> shards -> HF exact for Qwen2 (GQA, qkv bias, tied) and Llama (untied) at TP 1, 2, 4."""

import pytest
import torch
from verl.workers.engine.megatron.model import model_shape
from verl.workers.engine.megatron.weights import FC1, QKV, VOCAB, from_shards, hf_names, to_shard


def _qwen2(**kw):
    from transformers import Qwen2Config

    args = dict(vocab_size=101, hidden_size=16, num_attention_heads=8, num_key_value_heads=4, intermediate_size=12,
                num_hidden_layers=3, tie_word_embeddings=True)
    return Qwen2Config(**{**args, **kw})


def _llama():
    from transformers import LlamaConfig

    return LlamaConfig(vocab_size=64, hidden_size=8, num_attention_heads=4, num_key_value_heads=4,
                       intermediate_size=16, num_hidden_layers=2, tie_word_embeddings=False)


def test_grouped_qkv_and_gate_up_shards_by_hand():
    # 4 query heads in 2 groups, head_dim 1, hidden 1: rows are named by value
    shape = model_shape(_qwen2(hidden_size=4, num_attention_heads=4, num_key_value_heads=2, intermediate_size=4), 2)
    d = shape.head_dim  # 1
    q = torch.tensor([[10.0], [11.0], [12.0], [13.0]]).repeat_interleave(d, 0)
    k = torch.tensor([[20.0], [21.0]])
    v = torch.tensor([[30.0], [31.0]])
    full = to_shard(QKV, [q, k, v], shape, 0, 1)
    # group g: its two query heads, then its key head, then its value head
    assert full[:, 0].tolist() == [10, 11, 20, 30, 12, 13, 21, 31]
    assert to_shard(QKV, [q, k, v], shape, 1, 2)[:, 0].tolist() == [12, 13, 21, 31]
    gate, up = torch.arange(4.0)[:, None], 100 + torch.arange(4.0)[:, None]
    assert to_shard(FC1, [gate, up], shape, 0, 2)[:, 0].tolist() == [0, 1, 100, 101]
    assert to_shard(FC1, [gate, up], shape, 1, 2)[:, 0].tolist() == [2, 3, 102, 103]


def test_vocab_is_padded_to_the_tp_size_with_zero_rows():
    shape = model_shape(_qwen2(), 2)
    assert (shape.vocab_size, shape.padded_vocab_size) == (101, 102)
    emb = torch.randn(101, 16)
    second = to_shard(VOCAB, [emb], shape, 1, 2)
    assert second.shape == (51, 16) and torch.equal(second[:50], emb[51:]) and not second[50].any()


@pytest.mark.parametrize("make", [_qwen2, _llama], ids=["qwen2", "llama"])
@pytest.mark.parametrize("tp", [1, 2, 4])
def test_hf_to_megatron_to_hf_is_exact(make, tp):
    from transformers import AutoModelForCausalLM

    config = make()
    torch.manual_seed(0)
    hf = AutoModelForCausalLM.from_config(config).state_dict()
    shape = model_shape(config, tp)
    names = ["embedding.word_embeddings.weight", "decoder.final_layernorm.weight", "output_layer.weight"]
    for layer in range(config.num_hidden_layers):
        names += [f"decoder.layers.{layer}.{n}" for n in (
            "input_layernorm.weight", "self_attention.linear_qkv.weight", "self_attention.linear_proj.weight",
            "pre_mlp_layernorm.weight", "mlp.linear_fc1.weight", "mlp.linear_fc2.weight")]
        if shape.qkv_bias:
            names.append(f"decoder.layers.{layer}.self_attention.linear_qkv.bias")
    rebuilt = {}
    for name in names:
        kind, hf_keys = hf_names(name, 0, shape, "causal_lm")
        shards = [to_shard(kind, [hf[k] for k in hf_keys], shape, r, tp) for r in range(tp)]
        if kind != "none":
            assert sum(s.numel() for s in shards) >= sum(hf[k].numel() for k in hf_keys)  # split, not copied
        for key, tensor in zip(hf_keys, from_shards(kind, shards, shape)):
            rebuilt[key] = tensor
    expected = {k: v for k, v in hf.items() if not (config.tie_word_embeddings and k == "lm_head.weight")}
    assert sorted(rebuilt) == sorted(expected)
    for key, value in expected.items():
        assert torch.equal(rebuilt[key], value), key


def test_value_head_and_unmapped_names():
    shape = model_shape(_qwen2(), 1)
    assert hf_names("output_layer.weight", 0, shape, "value") == ("none", ("score.weight",))
    assert hf_names("output_layer.bias", 0, shape, "value") == ("none", ("score.bias",))
    assert hf_names("decoder.layers.1.mlp.linear_fc2.weight", 2, shape, "causal_lm")[1] == ("model.layers.3.mlp.down_proj.weight",)
    with pytest.raises(KeyError, match="no Hugging Face name for Megatron parameter 'decoder.layers.0.mlp.router.weight'"):
        hf_names("decoder.layers.0.mlp.router.weight", 0, shape, "causal_lm")


def test_unsupported_models_and_splits_are_refused():
    with pytest.raises(ValueError, match="tensor_model_parallel_size=4 must divide the model's 4 attention heads and 2 key/value heads"):
        model_shape(_qwen2(hidden_size=8, num_attention_heads=4, num_key_value_heads=2), 4)
    from transformers import GPT2Config

    with pytest.raises(NotImplementedError, match="this checkpoint is 'gpt2'"):
        model_shape(GPT2Config(), 1)
    with pytest.raises(NotImplementedError, match="RoPE scaling"):
        model_shape(_qwen2(rope_scaling={"rope_type": "linear", "factor": 2.0}), 1)


def test_uneven_pipeline_split_puts_the_remainder_on_the_end_stages():
    from types import SimpleNamespace

    from verl.workers.engine.megatron.model import _pipeline_split

    def split(layers, pp, **overrides):
        return _pipeline_split(layers, SimpleNamespace(pp=pp, vpp=None), overrides)

    assert split(3, 2) == {"num_layers_in_first_pipeline_stage": 2, "num_layers_in_last_pipeline_stage": 1}
    # 7 layers over 3 stages: 3 + 2 (middle: 7 // 3) + 2
    assert split(7, 3) == {"num_layers_in_first_pipeline_stage": 3, "num_layers_in_last_pipeline_stage": 2}
    assert split(4, 2) == {} and split(3, 1) == {}
    assert split(3, 2, num_layers_in_first_pipeline_stage=1) == {}  # the user's override stands
    with pytest.raises(ValueError, match="pipeline_model_parallel_size=4 is more than the model's 3 layers"):
        split(3, 4)
