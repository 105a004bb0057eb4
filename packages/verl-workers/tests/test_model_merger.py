import torch
from transformers import AutoModelForCausalLM, AutoModelForTokenClassification, AutoTokenizer
from verl.workers.actor import DataParallelPPOActor
from verl.workers.engine import build_engine
from verl.workers.model_merger import main, merge_checkpoint


def test_export_reloads_with_identical_outputs(dist_world1, tiny_model_dir, ppo_config, make_rl_batch, tmp_path):
    cfg = ppo_config(f"actor_rollout_ref.model.path={tiny_model_dir}", "actor_rollout_ref.actor.optim.lr=1e-2",
                     "actor_rollout_ref.model.enable_gradient_checkpointing=false")
    arr = cfg.actor_rollout_ref
    engine = build_engine("fsdp2", model_config=arr.model, engine_config=arr.actor.fsdp_config,
                          optim_config=arr.actor.optim, total_training_steps=3)
    actor = DataParallelPPOActor(arr.actor, engine, ppo_mini_batch_size_per_rank=8)
    data = make_rl_batch(n=8, seed=41)
    data.meta_info["micro_batch_size"] = 4
    actor.update_policy(data)  # trained weights differ from the initial checkpoint
    ckpt = str(tmp_path / "actor")
    engine.save_checkpoint(ckpt, global_step=1)
    expected, _ = actor.compute_log_prob(data)

    out = str(tmp_path / "hf")
    # the CLI's own parser and entry (python -m verl.workers.model_merger merge ...), run in-process
    assert main(["merge", "--local_dir", ckpt, "--target_dir", out]) == 0
    model = AutoModelForCausalLM.from_pretrained(out)
    b = data.batch
    with torch.no_grad():
        logits = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"],
                       position_ids=b["position_ids"]).logits[:, -6:-1]
    got = torch.log_softmax(logits, -1).gather(-1, b["responses"][..., None])[..., 0]
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    initial = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    assert not torch.equal(initial.model.embed_tokens.weight, model.model.embed_tokens.weight)
    tok = AutoTokenizer.from_pretrained(out)
    assert tok.decode(tok("12+3=")["input_ids"]) == "12+3="


def test_export_value_model(dist_world1, tiny_value_model_dir, ppo_config, tmp_path):
    cfg = ppo_config(f"actor_rollout_ref.model.path={tiny_value_model_dir}")
    c = cfg.critic
    engine = build_engine("fsdp2", model_config=c.model, engine_config=c.model.fsdp_config, optim_config=c.optim,
                          model_type="value")
    ckpt = str(tmp_path / "critic")
    engine.save_checkpoint(ckpt)
    merge_checkpoint(ckpt, str(tmp_path / "hf"))
    model = AutoModelForTokenClassification.from_pretrained(str(tmp_path / "hf"))
    sd = engine.full_state_dict()
    for k, v in model.state_dict().items():
        torch.testing.assert_close(v, sd[k], atol=0, rtol=0)


def test_bf16_mixed_precision_exports_the_fp32_master_weights(dist_world1, tiny_model_dir, ppo_config, make_rl_batch,
                                                              tmp_path):
    """model_dtype=bfloat16 loads the checkpoint in bf16 and trains fp32 master weights. The merger and
    the checkpoint's huggingface/ folder write those masters as they are (as upstream's
    save_pretrained(state_dict=...) does), not rounded to the bf16 the config names: after a step at
    lr 1e-2 most master values lie off the bf16 grid, so a bf16 export differs from them."""
    from omegaconf import OmegaConf

    cfg = ppo_config(f"actor_rollout_ref.model.path={tiny_model_dir}", "actor_rollout_ref.actor.optim.lr=1e-2",
                     "actor_rollout_ref.model.enable_gradient_checkpointing=false",
                     "actor_rollout_ref.model.model_dtype=bfloat16")
    arr = cfg.actor_rollout_ref
    engine = build_engine("fsdp2", model_config=arr.model, engine_config=arr.actor.fsdp_config,
                          optim_config=arr.actor.optim, total_training_steps=3)
    assert engine.precision.param_dtype == torch.bfloat16
    engine.checkpoint_config = OmegaConf.create({"save_contents": ["model", "optimizer", "extra", "hf_model"],
                                                 "load_contents": ["model", "optimizer", "extra"]})
    actor = DataParallelPPOActor(arr.actor, engine, ppo_mini_batch_size_per_rank=8)
    data = make_rl_batch(n=8, seed=43)
    data.meta_info["micro_batch_size"] = 4
    actor.update_policy(data)
    masters = engine.full_state_dict()
    assert {v.dtype for v in masters.values()} == {torch.float32}
    w = masters["model.embed_tokens.weight"]
    assert (w.to(torch.bfloat16).float() != w).float().mean() > 0.5  # off the bf16 grid: the test can fail
    ckpt = str(tmp_path / "actor")
    engine.save_checkpoint(ckpt, global_step=1)
    merge_checkpoint(ckpt, str(tmp_path / "merged"))
    for folder in (str(tmp_path / "merged"), f"{ckpt}/huggingface"):
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
        for k, v in model.state_dict().items():
            torch.testing.assert_close(v, masters[k], atol=0, rtol=0, msg=f"{folder}: {k}")
    assert engine.hf_config.dtype == torch.bfloat16  # the engine's own config is left as it was
