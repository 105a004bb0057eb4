"""Packed sequences (model.use_remove_padding) with real-token micro-batches: same numbers as padded."""

import pytest
import torch
from verl.utils.micro_batching import token_budget_groups
from verl.workers.critic import DataParallelPPOCritic
from verl.workers.engine import build_engine

from .test_dp_actor import _actor, _updated_weights

PACKED = "actor_rollout_ref.model.use_remove_padding=true"


def test_token_budget_groups_balance_real_tokens():
    lengths = [9, 2, 7, 3, 5, 5, 1, 8]  # 40 tokens, budget 14 -> 3 micro-batches
    groups = token_budget_groups(lengths, 14)
    assert len(groups) == 3
    assert sorted(i for g in groups for i in g) == list(range(8))
    sums = sorted(sum(lengths[i] for i in g) for g in groups)
    assert sums == [13, 13, 14]  # LPT by hand: 9+3+1 | 8+5 | 7+5+2
    assert token_budget_groups([50, 1], 10) == [[0], [1]]  # never more groups than rows
    with pytest.raises(ValueError, match="positive max token length"):
        token_budget_groups([3], 0)


def test_packed_dynamic_update_equals_padded_fixed(dist_world1, tiny_model_dir, ppo_config, make_rl_batch):
    data = make_rl_batch(n=8, seed=13)
    real = int(data.batch["attention_mask"].sum())
    w_ref, m_ref = _updated_weights(ppo_config, tiny_model_dir, data, 8)
    # budget of about a third of the real tokens: 3 packed micro-batches with rows in another order
    w_pk, m_pk = _updated_weights(ppo_config, tiny_model_dir, data, 8, PACKED,
                                  "actor_rollout_ref.actor.use_dynamic_bsz=true",
                                  f"actor_rollout_ref.actor.ppo_max_token_len_per_gpu={real // 3 + 1}")
    for k in w_ref:
        # Adam at lr 1e-3: fp-noise moves a weight by ~1e-6, a real mismatch by ~lr (100x the tolerance)
        torch.testing.assert_close(w_pk[k], w_ref[k], atol=1e-5, rtol=1e-5)
    for k in ("actor/pg_loss", "actor/kl_loss", "actor/entropy", "actor/grad_norm"):
        assert m_pk[k] == pytest.approx(m_ref[k], rel=1e-4, abs=1e-6), k


def test_packed_log_probs_come_back_in_row_order(dist_world1, tiny_model_dir, ppo_config, make_rl_batch):
    data = make_rl_batch(n=7, seed=4)
    mask = data.batch["response_mask"].bool()
    plain, _ = _actor(ppo_config, tiny_model_dir)
    data.meta_info.update(temperature=0.9, micro_batch_size=7)
    ref_lp, ref_ent = plain.compute_log_prob(data, calculate_entropy=True)
    packed, _ = _actor(ppo_config, tiny_model_dir, PACKED)
    data.meta_info.update(use_dynamic_bsz=True, max_token_len=20)
    lp, ent = packed.compute_log_prob(data, calculate_entropy=True)
    torch.testing.assert_close(lp[mask], ref_lp[mask], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ent[mask], ref_ent[mask], atol=1e-5, rtol=1e-5)


def test_packed_critic_values_and_update_equal_padded(dist_world1, tiny_value_model_dir, ppo_config, make_rl_batch):
    data = make_rl_batch(n=8, seed=6)
    results = []
    for extra in ((), ("critic.model.use_remove_padding=true", "critic.use_dynamic_bsz=true",
                       "critic.forward_max_token_len_per_gpu=25", "critic.ppo_max_token_len_per_gpu=30")):
        cfg = ppo_config(f"actor_rollout_ref.model.path={tiny_value_model_dir}",
                         "critic.model.enable_gradient_checkpointing=false", "critic.optim.lr=1e-2",
                         "critic.ppo_micro_batch_size_per_gpu=8", "critic.forward_micro_batch_size_per_gpu=8", *extra)
        c = cfg.critic
        engine = build_engine(c.strategy, model_config=c.model, engine_config=c.model.fsdp_config,
                              optim_config=c.optim, model_type="value", grad_clip=c.grad_clip, total_training_steps=10)
        assert engine.remove_padding is bool(extra)
        critic = DataParallelPPOCritic(c, engine, ppo_mini_batch_size_per_rank=8)
        values = critic.compute_values(data)
        critic.update_critic(data)
        results.append((values, engine.full_state_dict()))
    torch.testing.assert_close(results[1][0], results[0][0], atol=1e-5, rtol=1e-5)
    for k in results[0][1]:
        # Adam at lr 1e-2 turns fp-noise gradient differences into ~1e-6..1e-4 weight differences (it
        # normalises near-zero gradients); a real mismatch moves weights by ~lr, 20x the tolerance
        torch.testing.assert_close(results[1][1][k], results[0][1][k], atol=5e-4, rtol=1e-4)
