"""The megatron engine in the test process (one gloo rank, TP=PP=DP=1): Llama (untied head, no qkv
bias) and the value model against Hugging Face, a checkpoint round trip, and what it refuses."""

import pytest
import torch
from verl.workers.engine.testing import make_rl_batch

pytestmark = pytest.mark.slow  # imports Megatron-Core (~12 s on a quiet machine)


def _config(path, *extra):
    from verl.trainer.config import load_config

    return load_config([f"actor_rollout_ref.model.path={path}", "actor_rollout_ref.model.enable_gradient_checkpointing=false",
                        "actor_rollout_ref.actor.strategy=megatron", *extra])


def _engine(path, *extra, model_type="causal_lm", optim=True):
    from verl.workers.engine import build_engine

    cfg = _config(path, *extra)
    arr = cfg.actor_rollout_ref
    return build_engine("megatron", model_config=arr.model, engine_config=arr.actor.megatron,
                        optim_config=arr.actor.optim if optim else None, model_type=model_type,
                        grad_clip=arr.actor.grad_clip, total_training_steps=10, checkpoint_config=arr.actor.checkpoint)


@pytest.fixture(scope="module")
def tiny_llama_dir(tmp_path_factory):
    from transformers import LlamaConfig, LlamaForCausalLM
    from verl.workers.tiny import build_char_tokenizer

    path = tmp_path_factory.mktemp("tiny_llama")
    tok = build_char_tokenizer(path)
    torch.manual_seed(3)
    config = LlamaConfig(vocab_size=len(tok), hidden_size=32, num_attention_heads=4, num_key_value_heads=2,
                         intermediate_size=64, num_hidden_layers=2, tie_word_embeddings=False,
                         max_position_embeddings=128, pad_token_id=0, eos_token_id=1)
    LlamaForCausalLM(config).save_pretrained(path)
    return str(path)


def _hf_outputs(model, data, n_resp=5):
    b = data.batch
    with torch.no_grad():
        out = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"], position_ids=b["position_ids"])
    return out.logits[:, -n_resp - 1:-1]


def test_llama_log_probs_entropy_and_export_equal_hf(dist_world1, tiny_llama_dir):
    from transformers import AutoModelForCausalLM

    engine = _engine(tiny_llama_dir, optim=False)
    data = make_rl_batch(n=6, seed=2)
    out = engine.infer([mb.batch for mb in data.split(4)], temperature=0.5, calculate_entropy=True)
    hf = AutoModelForCausalLM.from_pretrained(tiny_llama_dir)
    logp = torch.log_softmax(_hf_outputs(hf, data) / 0.5, dim=-1)
    mask = data.batch["response_mask"].bool()
    torch.testing.assert_close(out["log_probs"][mask], logp.gather(-1, data.batch["responses"][..., None])[..., 0][mask],
                               atol=2e-6, rtol=1e-5)
    torch.testing.assert_close(out["entropys"][mask], -(logp.exp() * logp).sum(-1)[mask], atol=2e-6, rtol=1e-5)
    assert not out["log_probs"][~mask].any()  # outside the mask: 0
    exported = engine.full_state_dict()
    expected = hf.state_dict()
    assert sorted(exported) == sorted(expected)  # untied: lm_head.weight is its own tensor
    for k, v in expected.items():
        assert torch.equal(exported[k], v), k


def test_value_model_equals_hf_token_classifier(dist_world1, tiny_value_model_dir, tiny_model_dir):
    from transformers import AutoModelForTokenClassification

    engine = _engine(tiny_value_model_dir, model_type="value", optim=False)
    data = make_rl_batch(n=4, seed=3)
    values = engine.infer([data.batch])["values"]
    hf = AutoModelForTokenClassification.from_pretrained(tiny_value_model_dir)
    mask = data.batch["response_mask"].bool()
    torch.testing.assert_close(values[mask], _hf_outputs(hf, data)[..., 0][mask], atol=2e-6, rtol=1e-5)
    assert sorted(engine.full_state_dict()) == sorted(hf.state_dict())
    # from a causal-LM checkpoint the head is new: HF's initialisation, the same on every rank (seeded)
    fresh = _engine(tiny_model_dir, model_type="value", optim=False).full_state_dict()
    again = _engine(tiny_model_dir, model_type="value", optim=False).full_state_dict()
    assert torch.equal(fresh["score.weight"], again["score.weight"]) and not fresh["score.bias"].any()
    assert 0.01 < float(fresh["score.weight"].std()) < 0.03


def test_checkpoint_round_trip_restores_weights_optimizer_and_lr(dist_world1, tiny_model_dir, tmp_path):
    from verl.workers.actor import DataParallelPPOActor
    from verl.workers.checkpoint import is_complete_checkpoint, read_meta

    overrides = ["actor_rollout_ref.actor.optim.lr=1e-3", "actor_rollout_ref.actor.optim.lr_warmup_steps=3",
                 "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4"]
    cfg = _config(tiny_model_dir, *overrides)
    a, b = _engine(tiny_model_dir, *overrides), _engine(tiny_model_dir, *overrides)
    actor_a = DataParallelPPOActor(cfg.actor_rollout_ref.actor, a, ppo_mini_batch_size_per_rank=8)
    actor_b = DataParallelPPOActor(cfg.actor_rollout_ref.actor, b, ppo_mini_batch_size_per_rank=8)
    data1, data2 = make_rl_batch(n=8, seed=7), make_rl_batch(n=8, seed=8)
    actor_a.update_policy(data1)
    a.save_checkpoint(str(tmp_path / "ckpt"), global_step=1)
    assert is_complete_checkpoint(tmp_path / "ckpt") and read_meta(tmp_path / "ckpt")["strategy"] == "megatron"
    b.load_checkpoint(str(tmp_path / "ckpt"))
    sa, sb = a.full_state_dict(), b.full_state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert b.get_lr() == a.get_lr() == pytest.approx(1e-3 / 3)  # warmup step 1 of 3
    actor_a.update_policy(data2)
    actor_b.update_policy(data2)
    sa, sb = a.full_state_dict(), b.full_state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)  # same Adam state: the same second step, bit for bit


@pytest.mark.parametrize("override, error, match", [
    ("actor_rollout_ref.model.use_remove_padding=true", NotImplementedError, "THD layout, which needs Transformer Engine"),
    ("actor_rollout_ref.actor.megatron.grad_offload=true", ValueError, "megatron.grad_offload=True means nothing on CPU"),
    ("actor_rollout_ref.model.model_dtype=bfloat16", NotImplementedError, "on CPU use model_dtype=float32"),
    ("actor_rollout_ref.actor.megatron.context_parallel_size=2", NotImplementedError, "context parallelism needs Transformer Engine"),
    ("actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2", ValueError, "= 2 does not divide the 1 workers"),
])
def test_refused_settings_name_the_key(dist_world1, tiny_model_dir, override, error, match):
    with pytest.raises(error, match=match):
        _engine(tiny_model_dir, override)


def test_one_mini_batch_per_step_and_pipeline_forwards_need_no_grad(dist_world1, tiny_model_dir):
    engine = _engine(tiny_model_dir)
    data = make_rl_batch(n=2, seed=1)

    def loss_fn(out, mb):
        return out["log_probs"].sum() * 0, {}

    engine.forward_backward([data.batch], loss_fn)
    with pytest.raises(RuntimeError, match="call optimizer_step before the next one"):
        engine.forward_backward([data.batch], loss_fn)
    engine.optimizer_step()
    with pytest.raises(NotImplementedError, match="through the pipeline schedule only"):
        engine.forward_micro_batch(data.batch)
    with torch.no_grad():
        assert engine.forward_micro_batch(data.batch)["log_probs"].shape == (2, 5)


def test_gradient_checkpointing_maps_to_recompute_with_the_same_gradients(dist_world1, tiny_model_dir):
    data = make_rl_batch(n=4, seed=4)

    def loss_fn(out, mb):
        return (out["log_probs"] * mb["advantages"]).sum() / 20, {}

    norms = []
    for flag in ("false", "true"):
        engine = _engine(tiny_model_dir, f"actor_rollout_ref.model.enable_gradient_checkpointing={flag}")
        assert engine.tf_config.recompute_granularity == (None if flag == "false" else "full")
        engine.forward_backward([mb.batch for mb in data.split(2)], loss_fn)
        norms.append(engine.optimizer_step())
    assert norms[0] > 0 and norms[1] == pytest.approx(norms[0], rel=1e-6)
