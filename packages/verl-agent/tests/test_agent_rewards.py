"""Agent rewards reach the advantages: real tool loops with a GSM8K interaction, the reward manager
from config, core's advantage estimators. Expected numbers are derived by hand in the comments."""

import math

import numpy as np
import pytest
import torch
from verl import DataProto
from verl.agent.interactions import Gsm8kInteraction
from verl.agent.manager import AgentLoopManager
from verl.agent.server import ScriptedLLMServer
from verl.trainer.ppo import core_algos
from verl.trainer.ppo.reward import compute_reward, load_reward_manager

# Four rollouts of one prompt (one GRPO group). The model always answers "#### 5"; the tutor's
# ground truth is 5 for rows 0-1 (right: score 1, conversation ends) and 7 for rows 2-3 (wrong: the
# tutor asks again, the model repeats itself, max_user_turns=1 ends it; score 0). The rule reward
# (data_source "arithmetic", ground truth 5) is 1 for every row, so without the interaction's score
# the group has nothing to learn from.
TRUTHS = ["5", "5", "7", "7"]


def agent_batch(tokenizer, stop_ids, rollout_config):
    server = ScriptedLLMServer(lambda prompt: "#### 5", stop_ids, tokenizer)
    cfg = rollout_config(
        response_length=400, agent__default_agent_loop="tool_agent", multi_turn__max_user_turns=1
    )
    manager = AgentLoopManager(
        cfg, server, tokenizer, loop_kwargs={"interactions": {"gsm8k": Gsm8kInteraction({"name": "gsm8k"})}}
    )
    n = len(TRUTHS)
    prompts = DataProto.from_dict(
        non_tensors={
            "raw_prompt": np.array([[{"role": "user", "content": "2+3="}]] * n, dtype=object),
            "interaction_kwargs": np.array([{"name": "gsm8k", "ground_truth": t} for t in TRUTHS], dtype=object),
        },
        meta_info={"do_sample": True},
    )
    out = manager.generate_sequences(prompts)
    out.non_tensor_batch.update(
        uid=np.array(["g"] * n, dtype=object),
        data_source=np.array(["arithmetic"] * n, dtype=object),
        reward_model=np.array([{"ground_truth": "5"}] * n, dtype=object),
    )
    return out


def scores_and_advantages(batch, tokenizer, **reward_kwargs):
    from omegaconf import OmegaConf

    cfg = OmegaConf.create({"reward": {"reward_manager": "naive", "reward_kwargs": reward_kwargs}})
    metrics = {}
    reward, _ = compute_reward(batch, load_reward_manager(cfg, tokenizer, num_examine=0), metrics=metrics)
    adv, _ = core_algos.get_adv_estimator_fn("grpo")(
        token_level_rewards=reward, response_mask=batch.batch["response_mask"], index=batch.non_tensor_batch["uid"]
    )
    return reward, adv, metrics


@pytest.fixture(scope="module")
def batch(tokenizer, stop_ids):
    from verl.trainer.config.loader import load_config

    def rollout_config(**overrides):
        argv = [f"actor_rollout_ref.rollout.{k.replace('__', '.')}={v}" for k, v in overrides.items()]
        return load_config(argv).actor_rollout_ref.rollout

    return agent_batch(tokenizer, stop_ids, rollout_config)


def test_rollout_carries_the_interaction_scores(batch):
    assert batch.non_tensor_batch["reward_score"].tolist() == [1.0, 1.0, 0.0, 0.0]
    assert [list(t) for t in batch.non_tensor_batch["turn_scores"]] == [[1.0], [1.0], [0.0], [0.0]]
    assert batch.batch["response_mask"][2].sum() > batch.batch["response_mask"][0].sum()  # two model turns


def test_interaction_score_changes_the_grpo_advantages(batch, tokenizer):
    reward, adv, metrics = scores_and_advantages(batch, tokenizer)  # reward_score_weight defaults to 1
    mask = batch.batch["response_mask"]
    # Row score = rule 1 + interaction (1, 1, 0, 0) = (2, 2, 1, 1): mean 1.5, unbiased std
    # sqrt(4 * 0.25 / 3) = 0.57735, so advantages +-0.5 / 0.57735 = +-0.86603 on every model token.
    assert reward.sum(-1).tolist() == [2.0, 2.0, 1.0, 1.0]
    want = 0.5 / math.sqrt(1 / 3)
    for i, sign in enumerate([1, 1, -1, -1]):
        on = mask[i].bool()
        assert torch.allclose(adv[i][on], torch.full_like(adv[i][on], sign * want), atol=1e-4)
        assert torch.all(adv[i][~on] == 0)  # tool/user tokens and padding are never trained
        # The whole reward sits on the last model token (the final "<|im_end|>"), not on user tokens.
        last = int(on.nonzero().max())
        assert reward[i, last] == reward[i].sum() and mask[i, last] == 1
    assert metrics["reward/agent/reward_score/mean"] == 0.5
    assert metrics["reward/agent/turn_scores/mean"] == 0.5


def test_zero_weight_leaves_the_advantages_alone(batch, tokenizer):
    reward, adv, metrics = scores_and_advantages(batch, tokenizer, reward_score_weight=0.0)
    assert reward.sum(-1).tolist() == [1.0, 1.0, 1.0, 1.0]
    assert torch.count_nonzero(adv) == 0  # the group's rewards are equal: nothing to learn
    assert metrics["reward/agent/reward_score/mean"] == 0.5  # still logged


def test_turn_scores_land_on_the_turn_they_judge(batch, tokenizer):
    # Only the per-turn scores, weighted 2: rows 0-1 get 2 * 1 at the end of their only turn.
    reward, _, _ = scores_and_advantages(batch, tokenizer, reward_score_weight=0.0, turn_score_weight=2.0)
    mask = batch.batch["response_mask"]
    first_turn_end = int((mask[2] == 0).nonzero().min()) - 1  # row 2: the turn before the tutor spoke
    assert reward[0].sum() == 3.0 and reward[2].sum() == 1.0
    assert reward[2, first_turn_end] == 0.0 * 2 and mask[2, first_turn_end] == 1
    positions = batch.non_tensor_batch["turn_score_positions"]
    assert list(positions[2]) == [first_turn_end]


def test_unknown_weight_name_is_refused(batch, tokenizer):
    with pytest.raises(TypeError, match="reward_score_weight"):
        scores_and_advantages(batch, tokenizer, interaction_weight=1.0)


def test_masked_user_turn_in_gae_and_reinforce_pp(batch, tokenizer):
    """GAE with a zero critic and gamma=lam=1: every model token's advantage is the row's return,
    carried across the masked user turn (before whitening). REINFORCE++ with gamma=1 likewise."""
    reward, _, _ = scores_and_advantages(batch, tokenizer)
    mask = batch.batch["response_mask"]
    values = torch.zeros_like(reward)
    _, returns = core_algos.get_adv_estimator_fn("gae")(
        token_level_rewards=reward, values=values, response_mask=mask, gamma=1.0, lam=1.0
    )
    for i, total in enumerate([2.0, 2.0, 1.0, 1.0]):
        on = mask[i].bool()
        assert torch.allclose(returns[i][on], torch.full_like(returns[i][on], total))
        assert torch.all(returns[i][~on] == 0)


def test_reinforce_pp_return_crosses_the_user_turn(batch, tokenizer):
    reward, _, _ = scores_and_advantages(batch, tokenizer)
    mask = batch.batch["response_mask"]
    _, returns = core_algos.get_adv_estimator_fn("reinforce_plus_plus")(
        token_level_rewards=reward, response_mask=mask, gamma=1.0
    )
    on = mask[2].bool()
    assert torch.allclose(returns[2][on], torch.ones_like(returns[2][on]))  # row 2's return is 1 everywhere
