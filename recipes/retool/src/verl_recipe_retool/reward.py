"""ReTool's reward, as upstream's recipe computes it (``recipe/retool/retool.py: compute_score``).

- The final answer is checked with upstream's strict box rule (`verl.rewards.scoring.dapo_math`,
  ``strict_box_verify=True``): the last ``\\boxed{...}`` near the end of the response must equal the ground
  truth exactly. Right: +1. Wrong (a wrong box, or no box at all): -1.
- A wrong answer earns a bonus for tool use: ``(num_turns - 2) / 2 * 0.1`` (each tool call adds two turns,
  the call's assistant turn and the tool's answer, so 0.1 per call), and the result is capped at -0.6: a
  wrong answer never scores above -0.6, however many calls it made. ``num_turns`` is the agent loop's
  count (the prompt, every assistant turn and every tool turn; 2 for an answer without a call), which the
  reward manager passes in ``extra_info``.

This is the file ``reward.custom_reward_function.path`` points at when ``retool.reward=upstream`` (the
default), so it scores every data source, as upstream's does. Besides upstream's ``score`` / ``acc`` /
``pred`` it reports two diagnostics that change nothing in the score: ``tool_call`` (the response holds a
well-formed ``code_interpreter`` call) and ``tool_correct`` (the answer is right and came from the tool:
the ground truth appears in the interpreter's output the answer followed).
"""

from __future__ import annotations

from verl.rewards.scoring.dapo_math import compute_score as dapo_compute_score

TOOL_BONUS_PER_TURN = 0.05  # (num_turns - 2) / 2 * 0.1
WRONG_CAP = -0.6


def tool_bonus(num_turns: int) -> float:
    """Upstream's bonus for tool turns on a wrong answer, before the cap."""
    return (num_turns - 2) * TOOL_BONUS_PER_TURN


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs) -> dict:
    """See the module doc."""
    from verl_recipe_retool.task import tool_diagnostics

    if not extra_info or extra_info.get("num_turns") is None:
        raise KeyError(
            "ReTool's reward needs extra_info['num_turns'] (the agent loop's turn count, which the reward "
            f"manager passes for agent rollouts); got extra_info keys {sorted(extra_info or {})}"
        )
    result = dapo_compute_score(solution_str, str(ground_truth), strict_box_verify=True)
    if result["score"] < 0:
        result["score"] = min(WRONG_CAP, result["score"] + tool_bonus(int(extra_info["num_turns"])))
    result["acc"] = float(result["acc"])
    return {**result, **tool_diagnostics(solution_str, str(ground_truth), bool(result["acc"]))}
