"""ActorRolloutRefWorker / CriticWorker in this process (world size 1, gloo): the hybrid engine."""

import math

import pytest
import torch
from transformers import AutoTokenizer
from verl import DataProto
from verl.workers.fsdp_workers import ActorRolloutRefWorker, CriticWorker, per_rank_size


def test_per_rank_sizes_are_derived_not_written(make_cfg, tiny_model_dir):
    cfg = make_cfg(
        tiny_model_dir, "actor_rollout_ref.actor.ppo_mini_batch_size=3", "actor_rollout_ref.rollout.n=4"
    )
    w = ActorRolloutRefWorker(cfg.actor_rollout_ref, role="actor_rollout")
    assert w.ppo_mini_batch_size_per_rank == 12
    assert cfg.actor_rollout_ref.actor.ppo_mini_batch_size == 3  # untouched
    with pytest.raises(
        ValueError, match=r"ppo_mini_batch_size=3 prompts x rollout.n=3 = 9 trajectories .* 2 workers"
    ):
        per_rank_size(3, 3, 2, "actor.ppo_mini_batch_size")
    with pytest.raises(ValueError, match="unknown ActorRolloutRefWorker role 'critic'"):
        ActorRolloutRefWorker(cfg.actor_rollout_ref, role="critic")


@pytest.mark.parametrize("strategy", ["fsdp2", "fsdp"])
def test_hybrid_engine_generates_scores_and_sees_updates(make_cfg, prompts_for, tiny_model_dir, strategy):
    cfg = make_cfg(
        tiny_model_dir,
        "actor_rollout_ref.rollout.calculate_log_probs=true",
        f"actor_rollout_ref.actor.strategy={strategy}",
    )
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    w = ActorRolloutRefWorker(cfg.actor_rollout_ref, role="actor_rollout_ref", total_training_steps=3)
    w.init_model()
    assert w.rollout.module is w.actor_module  # no copy: the rollout samples from the trained module

    prompts = prompts_for(tok, ["1+2=", "40+5="], n=2, meta={"do_sample": False, "temperature": 1.0})
    gen = w.generate_sequences(prompts)
    assert len(gen) == 4 and gen.batch["responses"].shape[1] <= 6
    assert torch.equal(gen.batch["responses"][0], gen.batch["responses"][1])  # greedy: group rows agree
    if strategy == "fsdp2":  # one CPU rank: the engine trains the plain module (nothing to shard)
        from torch.distributed.tensor import DTensor

        assert not any(isinstance(p, DTensor) for p in w.actor_module.parameters())

    gen.meta_info["temperature"] = 1.0
    old = w.compute_log_prob(gen)
    ref = w.compute_ref_log_prob(gen)
    mask = gen.batch["response_mask"].bool()
    # rollout log-probs (KV cache) == actor recomputation (one forward) == reference before training
    torch.testing.assert_close(
        old.batch["old_log_probs"][mask], gen.batch["rollout_log_probs"][mask], atol=1e-4, rtol=1e-4
    )
    torch.testing.assert_close(ref.batch["ref_log_prob"], old.batch["old_log_probs"], atol=1e-5, rtol=0)
    assert old.batch["entropys"].shape == gen.batch["responses"].shape

    batch = gen.union(old).union(ref)
    batch.batch["advantages"] = (
        torch.tensor([1.0, -1.0, 1.0, -1.0]).unsqueeze(1) * batch.batch["response_mask"]
    )
    out = w.update_actor(batch)
    metrics = out.meta_info["metrics"]
    assert "actor/pg_loss" in metrics and "actor/grad_norm" in metrics
    assert all(math.isfinite(float(v)) for v in metrics.values())

    # The next generation runs on the updated weights: its log-probs match the updated actor's
    # recomputation and differ from the first generation's.
    gen2 = w.generate_sequences(prompts)
    gen2.meta_info["temperature"] = 1.0
    new = w.compute_log_prob(gen2)
    mask2 = gen2.batch["response_mask"].bool()
    torch.testing.assert_close(
        new.batch["old_log_probs"][mask2], gen2.batch["rollout_log_probs"][mask2], atol=1e-4, rtol=1e-4
    )
    first_before = gen.batch["rollout_log_probs"][:, 0]
    first_after = gen2.batch["rollout_log_probs"][:, 0]
    assert (first_before - first_after).abs().max() > 1e-3
    # the reference policy did not move
    ref2 = w.compute_ref_log_prob(gen)
    torch.testing.assert_close(ref2.batch["ref_log_prob"], ref.batch["ref_log_prob"], atol=1e-6, rtol=0)


def test_critic_worker_values_and_update(make_cfg, prompts_for, tiny_model_dir):
    torch.manual_seed(0)  # the value head is freshly initialised: make it the same in every run
    cfg = make_cfg(tiny_model_dir, "critic.optim.lr=0.003")
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    actor = ActorRolloutRefWorker(cfg.actor_rollout_ref, role="rollout")
    actor.init_model()
    gen = actor.generate_sequences(prompts_for(tok, ["3+3=", "9+1="], n=2, meta={"do_sample": False}))
    critic = CriticWorker(cfg.critic, total_training_steps=4)
    critic.init_model()
    values = critic.compute_values(gen).batch["values"]
    mask = gen.batch["response_mask"]
    assert values.shape == gen.batch["responses"].shape
    assert torch.all(values[mask == 0] == 0)
    returns = (values + 0.3) * mask  # inside cliprange_value=0.5 of the old values
    batch = gen.union(DataProto.from_dict(tensors={"values": values, "returns": returns}))
    for _ in range(4):
        m = critic.update_critic(batch).meta_info["metrics"]
        assert all(math.isfinite(float(v)) for v in m.values())
    new_values = critic.compute_values(gen).batch["values"]
    err = lambda v: ((v - returns).abs() * mask).sum() / mask.sum()  # noqa: E731
    assert err(new_values) < 0.5 * err(values)  # the value model moved towards the returns


def test_actor_checkpoint_roundtrip_and_keep_count(make_cfg, prompts_for, tiny_model_dir, tmp_path):
    cfg = make_cfg(tiny_model_dir, "actor_rollout_ref.rollout.calculate_log_probs=true")
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    w = ActorRolloutRefWorker(cfg.actor_rollout_ref, role="actor_rollout", total_training_steps=4)
    w.init_model()
    prompts = prompts_for(tok, ["2+2=", "8+1="], n=2, meta={"do_sample": False, "temperature": 1.0})
    gen = w.generate_sequences(prompts)
    gen.meta_info["temperature"] = 1.0

    keys = ["prompts", "responses", "response_mask", "input_ids", "attention_mask", "position_ids"]

    def train_step():
        batch = gen.select(batch_keys=keys)  # union works in place: keep gen itself clean
        batch = batch.union(w.compute_log_prob(batch))
        batch.batch["advantages"] = (
            torch.tensor([1.0, -1.0, 1.0, -1.0]).unsqueeze(1) * batch.batch["response_mask"]
        )
        w.update_actor(batch)

    w.save_checkpoint(str(tmp_path / "global_step_0" / "actor"), global_step=0, max_ckpt_to_keep=1)
    saved = w.compute_log_prob(gen).batch["old_log_probs"]
    train_step()
    w.save_checkpoint(str(tmp_path / "global_step_1" / "actor"), global_step=1, max_ckpt_to_keep=1)
    assert not (tmp_path / "global_step_0" / "actor").exists()  # only the newest is kept
    trained = w.compute_log_prob(gen).batch["old_log_probs"]
    assert not torch.allclose(trained, saved)
    sampling = prompts_for(tok, ["2+2=", "8+1="], n=2, meta={"do_sample": True, "temperature": 1.0})
    sampled_at_1 = w.generate_sequences(sampling)
    train_step()
    w.generate_sequences(sampling)  # draws move the sampling generator on
    w.load_checkpoint(str(tmp_path / "global_step_1" / "actor"))
    torch.testing.assert_close(w.compute_log_prob(gen).batch["old_log_probs"], trained, atol=1e-6, rtol=0)
    # the rollout samples from the reloaded weights, with the sampling generator as it was saved
    again = w.generate_sequences(sampling)
    assert torch.equal(again.batch["responses"], sampled_at_1.batch["responses"])
    torch.testing.assert_close(
        again.batch["rollout_log_probs"], sampled_at_1.batch["rollout_log_probs"], atol=1e-6, rtol=0
    )


def test_rollout_log_probs_as_old_log_probs_give_the_recomputed_update(make_cfg, prompts_for, tiny_model_dir):
    """use_rollout_log_probs skips the old-log-prob forward: the update from the rollout's own log-probs
    equals the update from a recomputation (same weights, so the same policy), and the update reports
    the entropy that the skipped pass would have (and computes none when it is not needed)."""
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    common = ("actor_rollout_ref.rollout.calculate_log_probs=true", "actor_rollout_ref.rollout.temperature=0.7")
    reuse = ActorRolloutRefWorker(
        make_cfg(tiny_model_dir, *common, "actor_rollout_ref.actor.use_rollout_log_probs=true").actor_rollout_ref,
        role="actor_rollout",
    )
    recompute = ActorRolloutRefWorker(make_cfg(tiny_model_dir, *common).actor_rollout_ref, role="actor_rollout")
    reuse.init_model()
    recompute.init_model()
    torch.manual_seed(3)
    gen = reuse.generate_sequences(prompts_for(tok, ["1+2=", "40+5="], n=2, meta={"temperature": 0.7}))
    gen.meta_info["temperature"] = 0.7
    old = recompute.compute_log_prob(gen)
    advantages = torch.tensor([1.0, -1.0, 0.5, -0.5]).unsqueeze(1) * gen.batch["response_mask"]

    tensors = {**dict(gen.batch.items()), "advantages": advantages}
    meta = dict(gen.meta_info)
    # what the trainer's old-log-prob stage does with use_rollout_log_probs
    by_rollout = DataProto.from_dict({**tensors, "old_log_probs": gen.batch["rollout_log_probs"]}, meta_info=meta)
    by_forward = DataProto.from_dict({**tensors, "old_log_probs": old.batch["old_log_probs"]}, meta_info=meta)
    before = [p.detach().clone() for p in recompute.actor_module.parameters()]
    m_rollout = reuse.update_actor(by_rollout).meta_info["metrics"]
    m_forward = recompute.update_actor(by_forward).meta_info["metrics"]

    # The two log-prob sources differ by float rounding only (KV-cache decode vs one forward), so the
    # gradients agree; Adam's first step (g / (|g| + eps)) can flip the few near-zero gradient entries,
    # so the weights are compared in aggregate: the disagreement is a tiny part of the update.
    assert m_rollout["actor/grad_norm"] == pytest.approx(m_forward["actor/grad_norm"], rel=1e-5)
    assert m_rollout["actor/pg_loss"] == pytest.approx(m_forward["actor/pg_loss"], abs=1e-5)
    disagree = moved = 0.0
    for p_reuse, p_rec, p0 in zip(reuse.actor_module.parameters(), recompute.actor_module.parameters(), before,
                                  strict=True):
        disagree += float((p_reuse - p_rec).abs().sum())
        moved += float((p_rec - p0).abs().sum())
    assert moved > 0 and disagree < 1e-3 * moved
    mask = gen.batch["response_mask"].float()
    token_mean_entropy = float((old.batch["entropys"] * mask).sum() / mask.sum())
    assert m_rollout["actor/entropy"] == pytest.approx(token_mean_entropy, rel=1e-4)
    assert "actor/entropy" not in m_forward  # entropy_coeff=0 and the old-log-prob pass reports it


@pytest.mark.parametrize("strategy", ["fsdp2", "fsdp"])
def test_refresh_ref_from_actor_gives_the_reference_the_actors_weights(make_cfg, prompts_for, tiny_model_dir,
                                                                       strategy):
    cfg = make_cfg(tiny_model_dir, f"actor_rollout_ref.actor.strategy={strategy}")
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    w = ActorRolloutRefWorker(cfg.actor_rollout_ref, role="actor_rollout_ref", total_training_steps=3)
    w.init_model()
    gen = w.generate_sequences(prompts_for(tok, ["3+4=", "21+8="], n=2, meta={"temperature": 1.0}))
    gen.meta_info["temperature"] = 1.0
    batch = gen.union(w.compute_log_prob(gen)).union(w.compute_ref_log_prob(gen))
    batch.batch["advantages"] = torch.tensor([1.0, -1.0, 1.0, -1.0]).unsqueeze(1) * batch.batch["response_mask"]
    w.update_actor(batch)
    mask = gen.batch["response_mask"].bool()
    actor_lp = w.compute_log_prob(gen).batch["old_log_probs"]
    ref_before = w.compute_ref_log_prob(gen).batch["ref_log_prob"]
    assert (actor_lp - ref_before)[mask].abs().max() > 1e-3  # the update moved the actor away from the ref
    w.refresh_ref_from_actor()
    ref_after = w.compute_ref_log_prob(gen).batch["ref_log_prob"]
    torch.testing.assert_close(ref_after[mask], actor_lp[mask], atol=1e-6, rtol=0)
    # the actor kept its weights and its optimizer: a second update still runs
    torch.testing.assert_close(w.compute_log_prob(gen).batch["old_log_probs"], actor_lp, atol=0, rtol=0)
    assert "actor/pg_loss" in w.update_actor(batch).meta_info["metrics"]

    no_ref = ActorRolloutRefWorker(cfg.actor_rollout_ref, role="actor_rollout")
    with pytest.raises(RuntimeError, match="refresh_ref_from_actor needs the actor and the reference"):
        no_ref.refresh_ref_from_actor()
