import pytest
import torch
from transformers import AutoModelForCausalLM
from verl.trainer.ppo.core_algos import get_policy_loss_fn, register_policy_loss
from verl.workers.actor import DataParallelPPOActor
from verl.workers.engine import build_engine


def _actor(ppo_config, path, *overrides, mini=None):
    cfg = ppo_config(f"actor_rollout_ref.model.path={path}", "actor_rollout_ref.model.enable_gradient_checkpointing=false",
                     *overrides)
    arr = cfg.actor_rollout_ref
    engine = build_engine(arr.actor.strategy, model_config=arr.model, engine_config=arr.actor.fsdp_config,
                          optim_config=arr.actor.optim, grad_clip=arr.actor.grad_clip, total_training_steps=10)
    return DataParallelPPOActor(arr.actor, engine, ppo_mini_batch_size_per_rank=mini), cfg


def _plain_log_probs(path, data, temperature):
    model = AutoModelForCausalLM.from_pretrained(path)
    b = data.batch
    with torch.no_grad():
        logits = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"],
                       position_ids=b["position_ids"]).logits
    r = b["responses"].shape[1]
    logp = torch.log_softmax(logits[:, -r - 1:-1] / temperature, dim=-1)
    return logp.gather(-1, b["responses"][..., None])[..., 0], logits


def test_compute_log_prob_matches_plain_forward(dist_world1, tiny_model_dir, ppo_config, make_rl_batch):
    actor, _ = _actor(ppo_config, tiny_model_dir)
    data = make_rl_batch(n=6, seed=3)
    data.meta_info.update(temperature=0.7, micro_batch_size=4)  # 6 rows: micro-batches of 4 and 2
    log_probs, entropys = actor.compute_log_prob(data, calculate_entropy=True)
    expected, logits = _plain_log_probs(tiny_model_dir, data, 0.7)
    assert log_probs.shape == (6, 5)
    mask = data.batch["response_mask"].bool()
    torch.testing.assert_close(log_probs[mask], expected[mask], atol=1e-5, rtol=1e-5)
    # entropy by hand from the probabilities at the response positions
    p = torch.softmax(logits[:, -6:-1] / 0.7, dim=-1)
    ent = -(p * torch.log(p)).sum(-1)
    torch.testing.assert_close(entropys[mask], ent[mask], atol=1e-4, rtol=1e-4)
    _, none = actor.compute_log_prob(data)
    assert none is None


def _loss_on(actor, data, cfg):
    """The PPO loss of the batch under the actor's current weights, computed in the test."""
    log_probs, _ = actor.compute_log_prob(data)
    pg, _ = get_policy_loss_fn("vanilla")(data.batch["old_log_probs"], log_probs, data.batch["advantages"],
                                          data.batch["response_mask"], "token-mean", cfg.actor_rollout_ref.actor)
    return float(pg)


def test_one_update_lowers_loss_and_reports_metrics(dist_world1, tiny_model_dir, ppo_config, make_rl_batch):
    actor, cfg = _actor(ppo_config, tiny_model_dir, "actor_rollout_ref.actor.optim.lr=1e-2",
                        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4", mini=8)
    data = make_rl_batch(n=8, seed=5)
    data.meta_info["micro_batch_size"] = 8
    # old_log_probs = current policy, so the clipped loss starts at -mean(A) and moves smoothly
    old, _ = actor.compute_log_prob(data)
    data.batch["old_log_probs"] = old
    before = _loss_on(actor, data, cfg)
    metrics = actor.update_policy(data)
    after = _loss_on(actor, data, cfg)
    assert after < before - 1e-3
    for key in ("actor/pg_loss", "actor/pg_clipfrac", "actor/ppo_kl", "actor/grad_norm", "actor/lr"):
        assert key in metrics and torch.isfinite(torch.tensor(metrics[key])), key
    # entropy_coeff=0 and the old log-probs came from a forward pass, which reports the entropy: the
    # update skips that softmax pass
    assert "actor/entropy" not in metrics
    # pg_loss reported is the loss of the whole mini-batch before the step
    assert abs(metrics["actor/pg_loss"] - before) < 1e-5
    assert metrics["actor/lr"] == 1e-2 and abs(metrics["actor/ppo_kl"]) < 1e-5


def _updated_weights(ppo_config, path, data, micro, *extra):
    actor, _ = _actor(ppo_config, path, "actor_rollout_ref.actor.optim.lr=1e-3",
                      f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={micro}",
                      "actor_rollout_ref.actor.use_kl_loss=true", "actor_rollout_ref.actor.entropy_coeff=0.01",
                      *extra, mini=len(data))
    metrics = actor.update_policy(data)
    return actor.engine.full_state_dict(), metrics


def test_micro_batch_count_does_not_change_update(dist_world1, tiny_model_dir, ppo_config, make_rl_batch):
    data = make_rl_batch(n=8, seed=11)
    for mode in ("token-mean", "seq-mean-token-mean"):
        agg = f"actor_rollout_ref.actor.loss_agg_mode={mode}"
        w1, m1 = _updated_weights(ppo_config, tiny_model_dir, data, 8, agg)
        w4, m4 = _updated_weights(ppo_config, tiny_model_dir, data, 2, agg)
        for k in w1:
            # Adam (lr 1e-3) normalises near-zero gradients, so summation-order noise can move a weight
            # by ~1e-6; a real mismatch moves many weights by ~lr = 1e-3, 100x the tolerance
            torch.testing.assert_close(w1[k], w4[k], atol=1e-5, rtol=1e-5)
        for k in ("actor/pg_loss", "actor/kl_loss", "actor/entropy", "actor/grad_norm"):
            assert abs(m1[k] - m4[k]) < 1e-5 * max(1.0, abs(m1[k])), (mode, k, m1[k], m4[k])


def test_update_needs_mini_batch_and_keys(dist_world1, tiny_model_dir, ppo_config, make_rl_batch):
    actor, _ = _actor(ppo_config, tiny_model_dir)
    data = make_rl_batch(n=4)
    with pytest.raises(ValueError, match="ppo_mini_batch_size_per_rank"):
        actor.update_policy(data)
    actor.ppo_mini_batch_size_per_rank = 4
    data.batch.pop("advantages")
    with pytest.raises(KeyError, match="advantages"):
        actor.update_policy(data)


def test_dynamic_batch_size_gives_the_same_update(dist_world1, tiny_model_dir, ppo_config, make_rl_batch):
    from verl.utils.micro_batching import rows_per_micro_batch

    assert rows_per_micro_batch(11, micro_batch_size=None, use_dynamic_bsz=True, max_token_len=30) == 2
    assert rows_per_micro_batch(11, micro_batch_size=None, use_dynamic_bsz=True, max_token_len=5) == 1
    with pytest.raises(ValueError, match="positive max token length"):
        rows_per_micro_batch(11, micro_batch_size=None, use_dynamic_bsz=True, max_token_len=0)
    data = make_rl_batch(n=8, seed=13)  # width 11: a 33-token budget holds 3 rows -> micro-batches 3, 3, 2
    w_fixed, m_fixed = _updated_weights(ppo_config, tiny_model_dir, data, 8)
    w_dyn, m_dyn = _updated_weights(ppo_config, tiny_model_dir, data, 8, "actor_rollout_ref.actor.use_dynamic_bsz=true",
                                    "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=33")
    for k in w_fixed:
        torch.testing.assert_close(w_fixed[k], w_dyn[k], atol=1e-6, rtol=1e-5)
    assert m_dyn["actor/pg_loss"] == pytest.approx(m_fixed["actor/pg_loss"], rel=1e-5)
    # inference with a token budget from meta_info gives the same log-probs
    actor, _ = _actor(ppo_config, tiny_model_dir)
    data.meta_info.update(use_dynamic_bsz=True, max_token_len=22)
    dyn, _ = actor.compute_log_prob(data)
    data.meta_info.update(use_dynamic_bsz=False, micro_batch_size=8)
    fixed, _ = actor.compute_log_prob(data)
    torch.testing.assert_close(dyn, fixed, atol=1e-6, rtol=1e-5)


def test_entropy_bonus_and_kl_loss_pull_the_policy(dist_world1, tiny_model_dir, ppo_config, make_rl_batch):
    from verl.trainer.ppo.core_algos import agg_loss, kl_penalty

    data = make_rl_batch(n=8, seed=17)
    data.batch["advantages"] = torch.zeros_like(data.batch["advantages"])  # no policy-gradient signal
    data.meta_info["micro_batch_size"] = 8
    mask = data.batch["response_mask"]

    actor, _ = _actor(ppo_config, tiny_model_dir, "actor_rollout_ref.actor.optim.lr=1e-2",
                      "actor_rollout_ref.actor.entropy_coeff=1.0", mini=8)
    lp, ent0 = actor.compute_log_prob(data, calculate_entropy=True)
    data.batch["old_log_probs"] = lp
    actor.update_policy(data)
    _, ent1 = actor.compute_log_prob(data, calculate_entropy=True)
    assert agg_loss(ent1, mask) > agg_loss(ent0, mask) + 1e-4

    actor, _ = _actor(ppo_config, tiny_model_dir, "actor_rollout_ref.actor.optim.lr=1e-2",
                      "actor_rollout_ref.actor.use_kl_loss=true", "actor_rollout_ref.actor.kl_loss_coef=1.0",
                      "actor_rollout_ref.actor.kl_loss_type=low_var_kl", mini=8)
    lp0, _ = actor.compute_log_prob(data)
    data.batch["old_log_probs"] = lp0
    ref = data.batch["ref_log_prob"]
    kl0 = agg_loss(kl_penalty(lp0, ref, "low_var_kl"), mask)
    metrics = actor.update_policy(data)
    assert metrics["actor/kl_loss"] == pytest.approx(float(kl0), rel=1e-5)
    lp1, _ = actor.compute_log_prob(data)
    assert agg_loss(kl_penalty(lp1, ref, "low_var_kl"), mask) < kl0 - 1e-4


# ------------------------------------------------------------------ grouped layout (rows_per_prompt)
_SEEN_UNITS: list[list[float]] = []


@register_policy_loss("_test_records_units")
def _records_units(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean", config=None,
                   rollout_is_weights=None, global_batch_info=None):
    """The vanilla loss, recording each micro-batch's per-row unit ids (stored in the advantages)."""
    _SEEN_UNITS.append(advantages[:, 0].tolist())
    return get_policy_loss_fn("vanilla")(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode,
                                         config, rollout_is_weights, global_batch_info)


def _paired_batch(make_rl_batch, pairs: int, seed: int):
    data = make_rl_batch(n=2 * pairs, seed=seed)
    unit_id = torch.arange(2 * pairs).div(2, rounding_mode="floor").float() + 1.0  # 1, 1, 2, 2, ...
    data.batch["advantages"] = unit_id[:, None].expand_as(data.batch["advantages"]).clone()
    data.meta_info["rows_per_prompt"] = 2
    return data


def test_rows_per_prompt_sizes_mini_batches_in_prompts_and_keeps_units(dist_world1, tiny_model_dir, ppo_config,
                                                                       make_rl_batch):
    # 4 pairs, ppo_mini_batch_size=2 prompts -> 2 mini-batches of 4 rows; micro-batches of 2 rows; shuffled
    actor, _ = _actor(ppo_config, tiny_model_dir, "actor_rollout_ref.actor.ppo_mini_batch_size=2",
                      "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2", "actor_rollout_ref.actor.shuffle=true",
                      "actor_rollout_ref.actor.ppo_epochs=2",
                      "actor_rollout_ref.actor.policy_loss.loss_mode=_test_records_units")
    data = _paired_batch(make_rl_batch, pairs=4, seed=19)
    _SEEN_UNITS.clear()
    actor.update_policy(data)  # no constructor mini-batch size: the layout gives it
    assert len(_SEEN_UNITS) == 2 * 2 * 2  # epochs x mini-batches x micro-batches
    for rows in _SEEN_UNITS:
        assert rows[0] == rows[1], _SEEN_UNITS  # a micro-batch holds one whole pair
    epoch_orders = [[r[0] for r in _SEEN_UNITS[i:i + 4]] for i in (0, 4)]
    assert all(sorted(o) == [1.0, 2.0, 3.0, 4.0] for o in epoch_orders)
    assert epoch_orders[0] != [1.0, 2.0, 3.0, 4.0] or epoch_orders[1] != [1.0, 2.0, 3.0, 4.0]  # shuffled


def test_rows_per_prompt_refuses_micro_batches_that_split_a_unit(dist_world1, tiny_model_dir, ppo_config,
                                                                 make_rl_batch):
    actor, _ = _actor(ppo_config, tiny_model_dir, "actor_rollout_ref.actor.ppo_mini_batch_size=2",
                      "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=3")
    with pytest.raises(ValueError, match=r"ppo_micro_batch_size_per_gpu=3 rows would split a prompt's 2 rows"):
        actor.update_policy(_paired_batch(make_rl_batch, pairs=2, seed=23))
    # a token budget rounds down to whole pairs: 33 tokens of width 11 hold 3 rows -> 2, same update as fixed 2
    data = _paired_batch(make_rl_batch, pairs=2, seed=23)
    w = []
    for extra in (("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",),
                  ("actor_rollout_ref.actor.use_dynamic_bsz=true", "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=33")):
        actor, _ = _actor(ppo_config, tiny_model_dir, "actor_rollout_ref.actor.ppo_mini_batch_size=2",
                          "actor_rollout_ref.actor.optim.lr=1e-3",
                          "actor_rollout_ref.actor.policy_loss.loss_mode=_test_records_units", *extra)
        _SEEN_UNITS.clear()
        actor.update_policy(data)
        assert [len(r) for r in _SEEN_UNITS] == [2, 2]
        w.append(actor.engine.full_state_dict())
    for k in w[0]:
        torch.testing.assert_close(w[0][k], w[1][k], atol=1e-6, rtol=1e-5)


def test_last_mini_batch_may_be_shorter(dist_world1, tiny_model_dir, ppo_config, make_rl_batch):
    """Upstream splits a step's rows with DataProto.split (a shorter last mini-batch), e.g. its
    run_qwen3-1.7b.sh: 1024 prompts in mini-batches of 80. 7 rows in mini-batches of 3 are three optimizer
    steps on rows 0-2, 3-5 and 6, the same as three updates on those slices one after the other."""
    data = make_rl_batch(n=7, seed=17)
    extra = (
        "actor_rollout_ref.actor.optim.lr=1e-3",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
    )
    actor, _ = _actor(ppo_config, tiny_model_dir, *extra, mini=3)
    actor.update_policy(data)
    split_weights = actor.engine.full_state_dict()

    ref, _ = _actor(ppo_config, tiny_model_dir, *extra, mini=3)
    for lo, hi in ((0, 3), (3, 6), (6, 7)):
        ref.ppo_mini_batch_size_per_rank = hi - lo
        ref.update_policy(data.slice(lo, hi))
    ref_weights = ref.engine.full_state_dict()
    for k in split_weights:
        torch.testing.assert_close(split_weights[k], ref_weights[k], atol=1e-5, rtol=1e-5)
    # the third (one-row) step happened: two steps only (rows 6 dropped) would leave other weights
    two, _ = _actor(ppo_config, tiny_model_dir, *extra, mini=3)
    two.update_policy(data.slice(0, 6))
    diff = max((two.engine.full_state_dict()[k] - split_weights[k]).abs().max().item() for k in split_weights)
    assert diff > 1e-4
