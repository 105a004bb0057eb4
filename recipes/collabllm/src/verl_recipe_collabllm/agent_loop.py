"""``collabllm_agent``: one trained assistant turn, then ``num_repeat_rollouts`` sampled futures.

For each row the policy writes one assistant turn to the conversation in the prompt; that turn is the
trajectory (prompt + turn, mask 1 on the turn) and the only thing trained. Its reward is the
multiturn-aware reward (MR): how the conversation goes on from it. So the loop then samples
``multi_turn.num_repeat_rollouts`` future conversations, each continued independently: the simulated
user (the row's interaction, ``interaction_kwargs.name``) answers, the policy answers back (sampled
with the rollout's settings, its own seed per call), and so on, until the user sends the termination
signal or the turn limits stop it. ``max_assistant_turns`` and ``max_user_turns`` count the whole
conversation from the trained turn on: with 3 and 2 a future is at most assistant (trained), user,
assistant, user, assistant.

The conversations go to the reward manager as the extra field ``messages`` = ``{"messages": [conv, ...]}``
(upstream's shape; each ``conv`` a list of ``{"role", "content"}`` from the prompt on). When the trained
turn ran into ``response_length`` (cut off) or is empty, no future is simulated: the user would answer
an unfinished message; the conversation is then scored as it stands (a single conversation).

Per-row metrics (``agent/<name>`` in the trainer): ``future_rollouts``, ``future_user_turns`` and
``future_assistant_turns`` (means over the futures, the trained turn not counted), ``user_terminated``
(share of futures the user ended), ``user_parse_failures``, ``first_turn_cut``.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass
from typing import Any

from verl.agent.agent_loop import AgentLoopBase, AgentLoopOutput, Trajectory, register_agent_loop
from verl.agent.interactions.base import BaseInteraction, load_interactions


@dataclass
class Future:
    messages: list[dict[str, Any]]
    user_turns: int
    assistant_turns: int  # after the trained turn
    user_terminated: bool
    parse_failures: int


def required_turn_limits(mt: Any) -> tuple[int, int, int]:
    """(num_repeat_rollouts, max_user_turns, max_assistant_turns) from ``rollout.multi_turn``, checked."""
    repeats = mt.get("num_repeat_rollouts")
    users, assistants = mt.get("max_user_turns"), mt.get("max_assistant_turns")
    problems = []
    if repeats is None or int(repeats) < 1:
        problems.append(f"num_repeat_rollouts={repeats} (futures sampled per trained turn) must be >= 1")
    if users is None or int(users) < 1:
        problems.append(f"max_user_turns={users} must be >= 1 (a future needs at least one user turn)")
    if assistants is None or int(assistants) < 2:
        problems.append(
            f"max_assistant_turns={assistants} must be >= 2 (the trained turn plus at least one in the future)"
        )
    if problems:
        raise ValueError(
            "collabllm_agent: actor_rollout_ref.rollout.multi_turn."
            + "; ".join(problems)
            + " (the recipe's config adds num_repeat_rollouts: run with verl-collabllm)"
        )
    return int(repeats), int(users), int(assistants)


@register_agent_loop("collabllm_agent")
class CollabLLMAgentLoop(AgentLoopBase):
    """See the module doc. ``interactions`` overrides ``multi_turn.interaction_config_path``."""

    def __init__(
        self,
        config: Any,
        server: Any,
        tokenizer: Any,
        interactions: dict[str, BaseInteraction] | None = None,
        **kwargs: Any,
    ):
        super().__init__(config, server, tokenizer, **kwargs)
        mt = config.multi_turn
        self.num_repeat_rollouts, self.max_user_turns, self.max_assistant_turns = required_turn_limits(mt)
        if interactions is None:
            if not mt.interaction_config_path:
                raise ValueError(
                    "collabllm_agent needs a simulated user: set actor_rollout_ref.rollout.multi_turn."
                    "interaction_config_path (see verl_recipe_collabllm.interaction)"
                )
            interactions = load_interactions(mt.interaction_config_path)
        self.interactions = dict(interactions)

    def _interaction(self, row: dict[str, Any]) -> tuple[BaseInteraction, dict[str, Any]]:
        extra_info = row.get("extra_info") or {}
        kwargs = dict(row.get("interaction_kwargs") or extra_info.get("interaction_kwargs") or {})
        name = kwargs.get("name")
        if name not in self.interactions:
            raise KeyError(
                f"row asks for interaction {name!r} (interaction_kwargs.name); configured: {sorted(self.interactions)}"
            )
        return self.interactions[name], kwargs

    async def run(self, sampling_params: dict[str, Any], **row: Any) -> AgentLoopOutput:
        messages = [dict(m) for m in row["raw_prompt"]]
        interaction, interaction_kwargs = self._interaction(row)
        request_id = str(row.get("request_id") or uuid.uuid4())
        stop_ids = list(self.server.stop_token_ids)

        traj = Trajectory(self.chat.prompt_ids(messages))
        out = await self.server.generate(
            traj.all_ids, self.turn_params(sampling_params, 0, self.max_response_length), f"{request_id}-0"
        )
        traj.add_model(out)
        first = self.chat.assistant_content(out.token_ids, stop_ids)
        conversation = messages + [{"role": "assistant", "content": first}]
        cut = out.stop_reason == "length"
        futures: list[Future] = []
        if not cut and first.strip():
            futures = await asyncio.gather(
                *(
                    self._future(
                        r, conversation, interaction, interaction_kwargs, sampling_params, request_id
                    )
                    for r in range(self.num_repeat_rollouts)
                )
            )
        conversations = [f.messages for f in futures] or [conversation]
        mean = lambda xs: float(sum(xs) / len(xs)) if xs else 0.0  # noqa: E731
        metrics = {
            "future_rollouts": float(len(futures)),
            "future_user_turns": mean([f.user_turns for f in futures]),
            "future_assistant_turns": mean([f.assistant_turns for f in futures]),
            "user_terminated": mean([float(f.user_terminated) for f in futures]),
            "user_parse_failures": float(sum(f.parse_failures for f in futures)),
            "first_turn_cut": float(cut),
        }
        return AgentLoopOutput(
            prompt_ids=traj.prompt_ids,
            response_ids=traj.response_ids,
            response_mask=traj.response_mask,
            response_logprobs=traj.response_logprobs,
            num_turns=2,  # the prompt and the trained turn, as upstream counts a single turn
            metrics=metrics,
            turn_metrics=[{"role": "assistant", "num_tokens": len(out.token_ids)}],
            extra_fields={
                "stop_reason": "response_length" if cut else "done",
                "messages": {"messages": conversations},
            },
        )

    async def _future(
        self,
        r: int,
        conversation: list[dict[str, Any]],
        interaction: BaseInteraction,
        interaction_kwargs: dict[str, Any],
        sampling_params: dict[str, Any],
        request_id: str,
    ) -> Future:
        """One sampled continuation of ``conversation`` (which ends with the trained turn)."""
        conv = [dict(m) for m in conversation]
        instance = await interaction.start_interaction(f"{request_id}-future{r}", **interaction_kwargs)
        users, assistants, terminated, parse_failures = 0, 1, False, 0
        stop_ids = list(self.server.stop_token_ids)
        try:
            while users < self.max_user_turns and assistants < self.max_assistant_turns:
                done, reply, _, extra = await interaction.generate_response(
                    instance, conv, **interaction_kwargs
                )
                parse_failures += int(bool(extra.get("parse_failed")))
                if done:
                    terminated = True
                    break
                conv.append({"role": "user", "content": reply})
                users += 1
                # Each future's calls get seeds of their own: turn index 1 + r * max_assistant_turns + k.
                params = self.turn_params(
                    sampling_params, 1 + r * self.max_assistant_turns + assistants, self.max_response_length
                )
                out = await self.server.generate(
                    self.chat.prompt_ids(conv), params, f"{request_id}-future{r}-{assistants}"
                )
                conv.append(
                    {"role": "assistant", "content": self.chat.assistant_content(out.token_ids, stop_ids)}
                )
                assistants += 1
                if out.stop_reason == "length":
                    break  # an unfinished message: the user would answer half a sentence
        finally:
            await interaction.finalize_interaction(instance)
        return Future(conv, users, assistants - 1, terminated, parse_failures)
