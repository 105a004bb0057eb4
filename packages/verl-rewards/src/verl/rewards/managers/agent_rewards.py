"""Rewards an agent loop earned during the rollout, added to the token-level reward.

verl-agent's loops write them into the batch (non-tensor columns, upstream's names):

- ``reward_score``: the trajectory's reward (an interaction's ``calculate_score``, an endpoint
  agent's return value); NaN when the loop had none. Added at the last assistant token (the last
  ``response_mask`` 1), times ``reward_score_weight``.
- ``tool_rewards`` / ``tool_reward_positions``: step rewards of tool calls (and a used tool's
  ``calc_reward`` at the end), each at the last token of the assistant turn that earned it, times
  ``tool_reward_weight``.
- ``turn_scores`` / ``turn_score_positions``: an interaction's per-turn scores, likewise, times
  ``turn_score_weight``.

Weights are reward-manager options (``reward.reward_kwargs.{reward_score_weight,
tool_reward_weight, turn_score_weight}``; defaults 1, 1, 0: an interaction's ``calculate_score``
usually summarises its turn scores). A weight of 0 leaves the reward untouched.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch


@dataclass(frozen=True)
class AgentRewardWeights:
    reward_score: float = 1.0
    tool_rewards: float = 1.0
    turn_scores: float = 0.0


def last_assistant_positions(data) -> torch.Tensor:
    """Per row, the response index of the last model token (``response_mask``), else of the last
    real token (``attention_mask``); 0 for an empty response."""
    responses = data.batch["responses"]
    r = responses.shape[-1]
    if "response_mask" in data.batch:
        mask = data.batch["response_mask"]
    elif "attention_mask" in data.batch:
        mask = data.batch["attention_mask"][:, -r:]
    else:
        raise KeyError("reward manager needs 'response_mask' or 'attention_mask' in the batch")
    positions = torch.arange(1, r + 1, device=mask.device).expand_as(mask)
    return ((positions * (mask != 0)).amax(dim=-1) - 1).clamp(min=0)


def _steps(nt: dict, values_key: str, positions_key: str, row: int) -> list[tuple[int, float]]:
    if values_key not in nt:
        return []
    values = list(nt[values_key][row] or [])
    positions = list(nt[positions_key][row] or []) if positions_key in nt else []
    if len(positions) != len(values):
        raise ValueError(
            f"row {row}: {values_key} has {len(values)} entries but {positions_key} has {len(positions)}; "
            "an agent loop must give each step reward the position of the turn it rewards"
        )
    return [(int(p), float(v)) for p, v in zip(positions, values)]


def add_agent_rewards(data, reward: torch.Tensor, weights: AgentRewardWeights) -> dict[str, float]:
    """Add the batch's agent rewards (when it has any) into ``reward`` [N, R] in place; return metrics."""
    nt = data.non_tensor_batch
    if not any(k in nt for k in ("reward_score", "tool_rewards", "turn_scores")):
        return {}
    last = last_assistant_positions(data).tolist()
    width = reward.shape[-1]
    traj_scores: list[float] = []
    tool_sums: list[float] = []
    turn_sums: list[float] = []
    for i in range(len(last)):
        score = float(nt["reward_score"][i]) if "reward_score" in nt else math.nan
        if not math.isnan(score):
            traj_scores.append(score)
            reward[i, last[i]] += weights.reward_score * score
        tool = _steps(nt, "tool_rewards", "tool_reward_positions", i)
        turn = _steps(nt, "turn_scores", "turn_score_positions", i)
        for steps, w in ((tool, weights.tool_rewards), (turn, weights.turn_scores)):
            for pos, value in steps:
                # A response cut at response_length may have lost the turn: its reward goes to the last one.
                reward[i, pos if pos < width else last[i]] += w * value
        tool_sums.append(sum(v for _, v in tool))
        turn_sums.append(sum(v for _, v in turn))
    metrics = {
        "reward/agent/tool_rewards/mean": float(np.mean(tool_sums)),
        "reward/agent/turn_scores/mean": float(np.mean(turn_sums)),
        "reward/agent/rows_with_reward_score": float(len(traj_scores)),
    }
    if traj_scores:
        metrics["reward/agent/reward_score/mean"] = float(np.mean(traj_scores))
    return metrics
