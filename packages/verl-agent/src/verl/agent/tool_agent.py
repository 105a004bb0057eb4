"""``tool_agent``: multi-turn rollouts with tool calls (in ``multi_turn.format``: ``hermes`` or ``gpt-oss``,
`verl.agent.tools.formats`) and interactions.

Each step: the model generates a turn (mask 1). If the turn calls tools, the calls run (at most
``multi_turn.max_parallel_calls`` per turn, concurrently) and their answers are appended as
``tool`` messages (mask 0); malformed or failing calls are answered with an error text. If it does
not and the row has an interaction, the interaction answers as the ``user`` (mask 0) or ends the
conversation. Otherwise the trajectory is done. The loop also stops when ``max_assistant_turns`` or
``max_user_turns`` is reached, or when the next environment turn would not leave room for a model
token within ``response_length`` (``response_length_exceeded`` = 1 in its metrics).

Row fields read: ``raw_prompt``; ``tools_kwargs`` ``{tool name: {"create_kwargs": {...},
"execute_kwargs": {...}}}``; ``interaction_kwargs`` ``{"name": ..., **kwargs}`` (either at the top
level of the row or inside ``extra_info``, as upstream datasets do).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any

from verl.agent.agent_loop import AgentLoopBase, AgentLoopOutput, Trajectory, register_agent_loop
from verl.agent.interactions.base import BaseInteraction, load_interactions
from verl.agent.tokenization import check_trajectory
from verl.agent.tools.base import BaseTool, tool_text
from verl.agent.tools.formats import tool_call_format
from verl.agent.tools.function_tool import FunctionTool, normalize_function_tool_return, validate_arguments
from verl.agent.tools.loader import load_all_tools
from verl.agent.tools.parser import FunctionCall, truncate_text

logger = logging.getLogger(__name__)


@register_agent_loop("tool_agent")
class ToolAgentLoop(AgentLoopBase):
    """See the module doc. ``tools`` (`BaseTool` or `FunctionTool` objects) / ``interactions``
    override the files named in ``multi_turn.tool_config_path`` + ``function_tool_path`` /
    ``interaction_config_path``."""

    def __init__(
        self,
        config: Any,
        server: Any,
        tokenizer: Any,
        tools: list[BaseTool | FunctionTool] | None = None,
        interactions: dict[str, BaseInteraction] | None = None,
        **kwargs: Any,
    ):
        super().__init__(config, server, tokenizer, **kwargs)
        mt = config.multi_turn
        if tools is None:
            tools = load_all_tools(mt.tool_config_path, mt.function_tool_path)
        if interactions is None:
            interactions = load_interactions(mt.interaction_config_path) if mt.interaction_config_path else {}
        self.tools = {t.name: t for t in tools}
        self.interactions = dict(interactions)
        self.tool_schemas = [t.tool_schema.to_dict() for t in tools] or None
        self.max_assistant_turns = mt.max_assistant_turns
        self.max_user_turns = mt.max_user_turns
        self.max_parallel_calls = int(mt.max_parallel_calls)
        self.max_tool_response_length = int(mt.max_tool_response_length)
        self.truncate_side = str(mt.tool_response_truncate_side)
        self.tool_timeout = float(mt.tool_timeout)
        if not self.tool_timeout > 0:
            raise ValueError(f"multi_turn.tool_timeout={mt.tool_timeout} must be a positive number of seconds")
        self.sanity_mode = str(mt.tokenization_sanity_check_mode)
        self.tool_format = tool_call_format(str(mt.format))

    async def _call_tool(
        self, call: FunctionCall, instances: dict[str, str], tools_kwargs: dict[str, Any]
    ) -> tuple[str, float, dict[str, Any]]:
        """(text for the model, step reward, metrics) of one call; a failing call becomes an error text."""
        tool = self.tools.get(call.name)
        if tool is None:
            return (
                f"Error: unknown tool {call.name!r}; available tools: {sorted(self.tools)}",
                0.0,
                {"tool_error": 1.0},
            )
        try:
            if isinstance(tool, FunctionTool):
                # Stateless: the arguments are checked against the schema, then the function runs.
                error = validate_arguments(tool.tool_schema, call.arguments)
                if error:
                    return f"Error: {error}", 0.0, {"tool_error": 1.0}
                response, reward, metrics = normalize_function_tool_return(
                    await asyncio.wait_for(tool.call(call.arguments), self.tool_timeout)
                )
            else:
                execute_kwargs = dict((tools_kwargs.get(call.name) or {}).get("execute_kwargs", {}))
                response, reward, metrics = await asyncio.wait_for(
                    tool.execute(instances[call.name], call.arguments, **execute_kwargs), self.tool_timeout
                )
            return tool_text(response), float(reward or 0.0), dict(metrics or {})
        except TimeoutError:  # a hung tool must not hang the rollout: the model sees it, a metric counts it
            logger.warning("tool %s did not answer within %s s on %r", call.name, self.tool_timeout, call.arguments)
            return (
                f"Error: tool {call.name!r} did not answer within {self.tool_timeout:g} s (multi_turn.tool_timeout)",
                0.0,
                {"tool_error": 1.0, "tool_timeout": 1.0},
            )
        except Exception as e:  # a tool bug must not kill the rollout: the model sees the error
            logger.warning("tool %s failed on %r: %r", call.name, call.arguments, e)
            return f"Error: tool {call.name!r} failed: {type(e).__name__}: {e}", 0.0, {"tool_error": 1.0}

    async def run(self, sampling_params: dict[str, Any], **row: Any) -> AgentLoopOutput:
        messages = [dict(m) for m in row["raw_prompt"]]
        tools_kwargs = dict(row.get("tools_kwargs") or {})
        extra_info = row.get("extra_info") or {}
        interaction_kwargs = dict(row.get("interaction_kwargs") or extra_info.get("interaction_kwargs") or {})
        request_id = str(row.get("request_id") or uuid.uuid4())
        stop_ids = list(self.server.stop_token_ids)

        traj = Trajectory(self.chat.prompt_ids(messages, self.tool_schemas))
        instances: dict[str, str] = {}
        for name, tool in self.tools.items():
            if not isinstance(tool, FunctionTool):  # function tools have no instances
                create_kwargs = dict((tools_kwargs.get(name) or {}).get("create_kwargs", {}))
                instances[name], _ = await tool.create(**create_kwargs)
        interaction = interaction_id = None
        if interaction_kwargs:
            name = interaction_kwargs.get("name")
            if name not in self.interactions:
                raise KeyError(
                    f"row asks for interaction {name!r}; configured interactions: {sorted(self.interactions)} "
                    "(set rollout.multi_turn.interaction_config_path)"
                )
            interaction = self.interactions[name]
            interaction_id = await interaction.start_interaction(**interaction_kwargs)

        assistant_turns = user_turns = tool_calls = tool_errors = calls_ok = 0
        # Step rewards (upstream's extra fields), each with the response position of the last token of
        # the assistant turn it rewards: the reward manager adds them there, weighted.
        tool_rewards: list[float] = []
        tool_reward_positions: list[int] = []
        turn_scores: list[float] = []
        turn_score_positions: list[int] = []
        called: set[str] = set()
        turn_metrics: list[dict[str, Any]] = []
        stop_reason = "done"
        while True:
            budget = self.max_response_length - len(traj.response_ids)
            out = await self.server.generate(
                traj.all_ids,
                self.turn_params(sampling_params, assistant_turns, budget),
                f"{request_id}-{assistant_turns}",
            )
            traj.add_model(out)
            assistant_turns += 1
            content = self.chat.assistant_content(out.token_ids, stop_ids)
            messages.append({"role": "assistant", "content": content})
            turn_metrics.append({"role": "assistant", "num_tokens": len(out.token_ids)})
            if out.stop_reason == "length":
                stop_reason = "response_length"
                break
            parsed = self.tool_format.parse(content) if self.tools else None
            wants_tools = parsed is not None and parsed.has_tool_call
            if not wants_tools and interaction is None:
                break
            if self.max_assistant_turns is not None and assistant_turns >= self.max_assistant_turns:
                stop_reason = "max_assistant_turns"
                break
            if self.max_user_turns is not None and user_turns >= self.max_user_turns:
                stop_reason = "max_user_turns"
                break
            if wants_tools:
                calls = parsed.calls[: self.max_parallel_calls]
                results = await asyncio.gather(*(self._call_tool(c, instances, tools_kwargs) for c in calls))
                # Tool output is cut to max_tool_response_length; the loop's own error texts are short.
                texts = list(parsed.errors) + [
                    truncate_text(r[0], self.max_tool_response_length, self.truncate_side) for r in results
                ]
                if len(parsed.calls) > len(calls):
                    texts.append(
                        f"Error: at most {self.max_parallel_calls} tool call(s) run per turn; "
                        f"{len(parsed.calls) - len(calls)} were ignored"
                    )
                tool_calls += len(calls)
                failed = sum(int(r[2].get("tool_error", 0)) for r in results)
                tool_errors += len(parsed.errors) + failed
                calls_ok += len(results) - failed
                tool_rewards += [float(r[1]) for r in results]
                tool_reward_positions += [len(traj.response_ids) - 1] * len(results)
                called.update(c.name for c in calls)
                env_messages = [{"role": "tool", "content": t} for t in texts]
                turn_metrics.append({"role": "tool", "tool_calls": len(calls), "errors": len(parsed.errors)})
            else:
                done, reply, score, _ = await interaction.generate_response(
                    interaction_id, messages, **interaction_kwargs
                )
                turn_scores.append(float(score))
                turn_score_positions.append(len(traj.response_ids) - 1)
                if done:
                    stop_reason = "interaction_done"
                    break
                env_messages = [{"role": "user", "content": reply}]
                turn_metrics.append({"role": "user", "turn_score": float(score)})
            env_ids = self.chat.encode(
                self.chat.glue_after(out.token_ids) + self.chat.render_messages(env_messages)
            )
            # The environment turn must leave room for at least one model token.
            if len(traj.response_ids) + len(env_ids) >= self.max_response_length:
                stop_reason = "response_length"
                break
            traj.add_env(env_ids)
            messages += env_messages
            turn_metrics[-1]["num_tokens"] = len(env_ids)
            user_turns += 1

        mismatch = check_trajectory(
            self.chat, messages, self.tool_schemas, traj.all_ids, stop_ids, self.sanity_mode
        )
        if mismatch:
            logger.warning("tokenization sanity check (request %s): %s", request_id, mismatch)
        last_model_token = max(i for i, m in enumerate(traj.response_mask) if m) if any(traj.response_mask) else 0
        for name, iid in instances.items():
            final = float(await self.tools[name].calc_reward(iid))
            if name in called:  # a used tool's verdict on the whole trajectory rewards the last turn
                tool_rewards.append(final)
                tool_reward_positions.append(last_model_token)
            await self.tools[name].release(iid)
        reward = None
        if interaction is not None:
            reward = float(await interaction.calculate_score(interaction_id))
            await interaction.finalize_interaction(interaction_id)
        metrics = {
            "assistant_turns": float(assistant_turns),
            "user_turns": float(user_turns),
            "tool_calls": float(tool_calls),
            "tool_call_errors": float(tool_errors),
            "has_tool_call": float(tool_calls + tool_errors > 0),
            # a call that parsed, named a known tool with valid arguments and ran without error
            "well_formed_tool_call": float(calls_ok > 0),
            "step_reward": float(sum(tool_rewards)),
            "response_length_exceeded": float(stop_reason == "response_length"),
            "turn_limit_reached": float(stop_reason in ("max_assistant_turns", "max_user_turns")),
            "tokenization_mismatch": float(mismatch is not None),
        }
        return AgentLoopOutput(
            prompt_ids=traj.prompt_ids,
            response_ids=traj.response_ids,
            response_mask=traj.response_mask,
            response_logprobs=traj.response_logprobs,
            response_versions=traj.response_versions,
            num_turns=assistant_turns + user_turns + 1,  # + the prompt's user turn, as upstream counts
            metrics=metrics,
            turn_metrics=turn_metrics,
            reward_score=reward,
            extra_fields={
                "stop_reason": stop_reason,
                "messages": messages,
                "tool_rewards": tool_rewards,
                "tool_reward_positions": tool_reward_positions,
                "turn_scores": turn_scores,
                "turn_score_positions": turn_score_positions,
            },
        )
