"""LoRA RL on the FSDP engine (verl.workers.engine.lora), checked against peft itself and the plain model:
only adapters train, the merged weights the rollout gets equal peft's ``merge_and_unload``, the reference
(adapters disabled) equals the base model, checkpoints hold a peft adapter, the HF export merges it."""

import copy
import os

import pytest
import torch

R, ALPHA = 4, 8


def _cfg(ppo_config, model_dir, *extra):
    return ppo_config(
        f"actor_rollout_ref.model.path={model_dir}",
        "actor_rollout_ref.model.enable_gradient_checkpointing=false",
        f"actor_rollout_ref.model.lora_rank={R}",
        f"actor_rollout_ref.model.lora_alpha={ALPHA}",
        "actor_rollout_ref.actor.optim.lr=5e-2",
        "actor_rollout_ref.actor.optim.weight_decay=0.0",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
        "actor_rollout_ref.actor.ppo_mini_batch_size=8",
        "actor_rollout_ref.rollout.n=1",
        *extra,
    ).actor_rollout_ref


def _actor(arr, train=True):
    from verl.workers.actor import DataParallelPPOActor
    from verl.workers.engine import build_engine

    engine = build_engine(
        "fsdp2",
        model_config=arr.model,
        engine_config=arr.actor.fsdp_config,
        optim_config=arr.actor.optim if train else None,
        grad_clip=1.0,
        total_training_steps=4,
    )
    return DataParallelPPOActor(arr.actor, engine, ppo_mini_batch_size_per_rank=8)


@pytest.fixture(scope="module")
def trained(tiny_model_dir, dist_world1, ppo_config):
    """A LoRA actor after two PPO updates (so the adapters are no longer zero), and the batch."""
    from verl.workers.engine.testing import make_rl_batch

    torch.manual_seed(0)
    arr = _cfg(ppo_config, tiny_model_dir)
    actor = _actor(arr)
    base_before = {k: v.clone() for k, v in actor.engine.module.state_dict().items() if "lora_" not in k}
    data = make_rl_batch(n=8, seed=3)
    for _ in range(2):
        actor.update_policy(data)
    return arr, actor, data, base_before


def test_only_adapters_train(trained, tiny_model_dir):
    from transformers import AutoModelForCausalLM

    _, actor, _, base_before = trained
    module, opt = actor.engine.module, actor.engine.optimizer
    trainable = {n: p for n, p in module.named_parameters() if p.requires_grad}
    # expected count from the plain model: every Linear except the output head gets A [r, in] and B [out, r]
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    expected = sum(
        R * (m.in_features + m.out_features)
        for n, m in base.named_modules()
        if isinstance(m, torch.nn.Linear) and n != "lm_head"
    )
    assert sum(p.numel() for p in trainable.values()) == expected
    assert all(".lora_A." in n or ".lora_B." in n for n in trainable)
    # optimizer state exists for exactly the adapter parameters
    state_params = {id(p) for p in opt.state}
    assert state_params == {id(p) for p in trainable.values()}
    assert sum(len(g["params"]) for g in opt.param_groups) == len(trainable)
    # frozen base weights did not move, the adapters did (B starts at zero)
    after = module.state_dict()
    for k, v in base_before.items():
        torch.testing.assert_close(after[k], v, rtol=0, atol=0)
    assert all(float(p.abs().max()) > 0 for n, p in trainable.items() if ".lora_B." in n)


def test_merged_weights_equal_peft_merge_and_unload(trained, tiny_model_dir):
    from transformers import AutoModelForCausalLM
    from verl.workers.engine.lora import unwrap_peft

    _, actor, data, _ = trained
    engine = actor.engine
    before = {k: v.clone() for k, v in engine.module.state_dict().items()}
    merged = engine.hf_state_dict()
    # the training module is left as it was (no merge/unmerge in place)
    for k, v in engine.module.state_dict().items():
        torch.testing.assert_close(v, before[k], rtol=0, atol=0)
    # independent: peft merges a copy of the same module
    reference = copy.deepcopy(unwrap_peft(engine.module)).merge_and_unload().state_dict()
    assert set(merged) == set(reference) - {"lm_head.weight"}  # tied head sent once
    for k, v in merged.items():
        torch.testing.assert_close(v, reference[k], rtol=1e-6, atol=1e-6)
    # the plain HF model with the merged weights computes what the LoRA model computes
    plain = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    plain.load_state_dict(merged, strict=False)
    ids, mask = data.batch["input_ids"], data.batch["attention_mask"]
    with torch.no_grad():
        want = engine.module(input_ids=ids, attention_mask=mask).logits
        got = plain(input_ids=ids, attention_mask=mask).logits
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert not torch.allclose(
        merged["model.layers.0.self_attn.q_proj.weight"],
        AutoModelForCausalLM.from_pretrained(tiny_model_dir).state_dict()[
            "model.layers.0.self_attn.q_proj.weight"
        ],
    )


def test_reference_is_the_base_model(trained, tiny_model_dir, ppo_config):
    from verl.workers.actor import DataParallelPPOActor
    from verl.workers.engine.lora import AdapterDisabledEngine

    arr, actor, data, _ = trained
    data = data.select(["input_ids", "attention_mask", "position_ids", "responses"])
    data.meta_info.update(micro_batch_size=4, temperature=1.0)
    ref = DataParallelPPOActor(arr.ref, AdapterDisabledEngine(actor.engine))
    ref_lp, _ = ref.compute_log_prob(data)
    plain = _actor(_cfg(ppo_config, tiny_model_dir, "actor_rollout_ref.model.lora_rank=0"), train=False)
    assert plain.engine.lora is None
    base_lp, _ = plain.compute_log_prob(data)
    torch.testing.assert_close(ref_lp, base_lp, rtol=1e-5, atol=1e-5)
    # with the adapters on, the (trained) actor differs from the base model
    actor_lp, _ = actor.compute_log_prob(data)
    assert (actor_lp - base_lp).abs().max() > 1e-3
    with pytest.raises(RuntimeError, match="cannot forward_backward"):
        _ = ref.engine.forward_backward


def test_checkpoint_adapter_and_hf_export(trained, tiny_model_dir, ppo_config, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM
    from verl.workers.model_merger import merge_checkpoint

    _, actor, data, _ = trained
    engine = actor.engine
    ckpt = str(tmp_path / "ckpt")
    engine.save_checkpoint(ckpt, global_step=2)
    adapter = os.path.join(ckpt, "lora_adapter")
    assert sorted(os.listdir(adapter)) == ["adapter_config.json", "adapter_model.safetensors"]
    ids, mask = data.batch["input_ids"], data.batch["attention_mask"]
    with torch.no_grad():
        want = engine.module(input_ids=ids, attention_mask=mask).logits
        # peft loads our adapter onto the base model and computes the same
        loaded = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model_dir), adapter)
        torch.testing.assert_close(
            loaded(input_ids=ids, attention_mask=mask).logits, want, rtol=1e-5, atol=1e-5
        )
        # the offline export merges the DCP shards' adapter into a plain HF folder
        out = merge_checkpoint(ckpt, str(tmp_path / "hf"))
        exported = AutoModelForCausalLM.from_pretrained(out)
        torch.testing.assert_close(
            exported(input_ids=ids, attention_mask=mask).logits, want, rtol=1e-5, atol=1e-5
        )
        assert os.path.isfile(
            os.path.join(
                merge_checkpoint(ckpt, str(tmp_path / "ad"), lora_mode="adapter"), "adapter_model.safetensors"
            )
        )
    # lora_adapter_path starts a new run from the saved adapter
    resumed = _actor(
        _cfg(
            ppo_config,
            tiny_model_dir,
            f"actor_rollout_ref.model.lora_adapter_path={adapter}",
            "actor_rollout_ref.model.lora_rank=0",
        )
    )
    got = resumed.engine.hf_state_dict()
    for k, v in engine.hf_state_dict().items():
        torch.testing.assert_close(got[k], v, rtol=1e-6, atol=1e-6)
    assert any(p.requires_grad for p in resumed.engine.module.parameters())


def test_config_errors_name_the_key(ppo_config, tmp_path):
    from verl.trainer.config import ConfigError, validate_config

    def problems(*overrides):
        cfg = ppo_config("actor_rollout_ref.model.path=/m", "data.train_files=x.parquet", *overrides)
        with pytest.raises(ConfigError) as e:
            validate_config(cfg)
        return str(e.value)

    assert "lora_rank=-1" in problems("actor_rollout_ref.model.lora_rank=-1")
    assert "lora_alpha=0" in problems(
        "actor_rollout_ref.model.lora_rank=8", "actor_rollout_ref.model.lora_alpha=0"
    )
    assert "no adapter_config.json" in problems(f"actor_rollout_ref.model.lora_adapter_path={tmp_path}")
    assert "strategy=megatron" in problems(
        "actor_rollout_ref.model.lora_rank=8", "actor_rollout_ref.actor.strategy=megatron"
    )


def test_adapters_train_with_bf16_compute(tiny_model_dir, dist_world1, ppo_config):
    """bf16 compute on one rank (ComputeCast): peft casts a layer's input to the adapter weight's dtype
    before the adapter's own cast runs (the fp32 master's), which the adapter's cast of its inputs undoes;
    adapters stay fp32 masters and move, the base stays frozen."""
    from verl.workers.engine.testing import make_rl_batch

    torch.manual_seed(0)
    arr = _cfg(ppo_config, tiny_model_dir, "actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=bf16")
    actor = _actor(arr)
    assert actor.engine.precision.param_dtype == torch.bfloat16
    before = {k: v.clone() for k, v in actor.engine.module.state_dict().items()}
    actor.update_policy(make_rl_batch(n=8, seed=3))
    after = actor.engine.module.state_dict()
    assert all(v.dtype == torch.float32 for v in after.values() if v.is_floating_point())
    moved = {k for k in before if not torch.equal(before[k], after[k])}
    assert moved and all("lora_" in k for k in moved)
    assert any("lora_B" in k for k in moved)
