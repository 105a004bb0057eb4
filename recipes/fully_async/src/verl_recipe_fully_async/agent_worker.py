"""The pools' worker for multi-turn runs (``actor_rollout_ref.rollout.multi_turn.enable``): the recipe's
worker with verl-agent's agent loops (``AgentActorRolloutRefWorker``).

On the rollout pool (vLLM's async engine) each sample is one ``AgentLoopManager`` run over its
``rollout.n`` rows (``stream_worker``): every model turn is a request on the engine that holds the
current weights (a weight sync pauses it mid-turn and resumes it under the new weights, like any
request), tool calls run through verl-agent's tools (the code interpreter in verl-rewards' sandbox),
interactions answer as the user; the trajectory comes back with the same tensors, masks (0 on tool and
user tokens) and reward fields (``reward_score``, ``tool_rewards``, ``turn_scores``) as in core's
synchronous trainer, plus each model token's weights version. On the trainer pool the agent loops run
on the actor's live module for validation, as core's trainer does with multi-turn.
"""

from __future__ import annotations

from verl.agent.worker import AgentActorRolloutRefWorker

from verl_recipe_fully_async.workers import AsyncActorRolloutWorker


class AgentAsyncActorRolloutWorker(AsyncActorRolloutWorker, AgentActorRolloutRefWorker):
    """``AsyncActorRolloutWorker`` whose rollout runs verl-agent's loops (see the module doc)."""


__all__ = ["AgentAsyncActorRolloutWorker"]
