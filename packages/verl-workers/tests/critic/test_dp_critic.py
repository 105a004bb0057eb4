import torch
from transformers import AutoModelForTokenClassification
from verl.trainer.ppo.core_algos import compute_value_loss
from verl.workers.critic import DataParallelPPOCritic
from verl.workers.engine import build_engine


def _critic(ppo_config, path, *overrides, mini=None):
    cfg = ppo_config(f"actor_rollout_ref.model.path={path}", "critic.model.enable_gradient_checkpointing=false",
                     *overrides)
    c = cfg.critic
    engine = build_engine(c.strategy, model_config=c.model, engine_config=c.model.fsdp_config,
                          optim_config=c.optim, model_type="value", grad_clip=c.grad_clip, total_training_steps=10)
    return DataParallelPPOCritic(c, engine, ppo_mini_batch_size_per_rank=mini), cfg


def test_values_match_plain_forward(dist_world1, tiny_value_model_dir, ppo_config, make_rl_batch):
    critic, _ = _critic(ppo_config, tiny_value_model_dir, "critic.forward_micro_batch_size_per_gpu=3")
    data = make_rl_batch(n=5, seed=2)
    values = critic.compute_values(data)
    model = AutoModelForTokenClassification.from_pretrained(tiny_value_model_dir)
    b = data.batch
    with torch.no_grad():
        out = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"], position_ids=b["position_ids"])
    expected = out.logits[:, -6:-1, 0] * b["response_mask"]
    assert values.shape == (5, 5)
    torch.testing.assert_close(values, expected, atol=1e-5, rtol=1e-5)


def test_critic_from_causal_lm_path_and_update_lowers_value_loss(
    dist_world1, tiny_model_dir, ppo_config, make_rl_batch
):
    # the critic loads the backbone of a causal-LM checkpoint and adds a fresh scalar head
    critic, cfg = _critic(ppo_config, tiny_model_dir, "critic.optim.lr=1e-2", "critic.ppo_micro_batch_size_per_gpu=2",
                          mini=8)
    data = make_rl_batch(n=8, seed=7)
    data.batch["values"] = critic.compute_values(data)
    mask = data.batch["response_mask"]

    def vf_loss():
        v = critic.compute_values(data)
        return float(compute_value_loss(v, data.batch["returns"], data.batch["values"], mask, 0.5)[0])

    before = vf_loss()
    metrics = critic.update_critic(data)
    after = vf_loss()
    assert after < before - 1e-3
    assert abs(metrics["critic/vf_loss"] - before) < 1e-5
    for k in ("critic/vf_clipfrac", "critic/grad_norm", "critic/lr", "critic/vpred_mean"):
        assert torch.isfinite(torch.tensor(metrics[k])), k


def test_last_mini_batch_may_be_shorter(dist_world1, tiny_value_model_dir, ppo_config, make_rl_batch):
    """As the actor (upstream's data.split): 7 rows in mini-batches of 3 are three optimizer steps, the
    same as updates on rows 0-2, 3-5 and 6 one after the other."""
    data = make_rl_batch(n=7, seed=19)
    extra = ("critic.optim.lr=1e-3", "critic.ppo_micro_batch_size_per_gpu=2")
    critic, _ = _critic(ppo_config, tiny_value_model_dir, *extra, mini=3)
    data.batch["values"] = critic.compute_values(data)
    metrics = critic.update_critic(data)
    ref, _ = _critic(ppo_config, tiny_value_model_dir, *extra, mini=3)
    for lo, hi in ((0, 3), (3, 6), (6, 7)):
        ref.ppo_mini_batch_size_per_rank = hi - lo
        ref.update_critic(data.slice(lo, hi))
    got, want = critic.engine.full_state_dict(), ref.engine.full_state_dict()
    for k in want:
        torch.testing.assert_close(got[k], want[k], atol=1e-5, rtol=1e-5)
    assert torch.isfinite(torch.tensor(metrics["critic/vf_loss"]))
