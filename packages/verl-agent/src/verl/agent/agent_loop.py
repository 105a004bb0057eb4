"""The agent-loop API (upstream: ``verl.experimental.agent_loop``).

An agent loop turns one dataset row into one trajectory by talking to the policy through an
`AsyncLLMServer` (token ids in, token ids out), to tools and to interactions. Loops register by
name in ``verl.registries.AGENT_LOOPS``; a row's ``agent_name`` picks one, else
``rollout.agent.default_agent_loop``. The same loop instance serves many concurrent ``run`` calls,
so a loop keeps per-trajectory state in locals, never on ``self``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

from verl.agent.server import AsyncLLMServer, TokenOutput
from verl.agent.tokenization import ChatTokens
from verl.registries import AGENT_LOOPS


@dataclass
class AgentLoopOutput:
    """One trajectory. ``response_mask`` is 1 on model-generated tokens and 0 on tool / user /
    environment tokens; ``response_logprobs`` is the sampling log-prob on model tokens, 0 elsewhere.
    ``num_turns`` counts the messages of the conversation as upstream does: the prompt's user turn, plus
    every assistant turn and every environment (tool / user) turn after it (a single turn is 2). ``metrics`` are per-trajectory
    numbers (averaged over the batch by the manager); ``turn_metrics`` one dict per turn.
    ``reward_score`` is the environment's reward when there is one (interactions), else None.
    ``response_versions``: the weights version of each model token (-1 on environment tokens) when the
    server reports them (`TokenOutput.versions`), else None."""

    prompt_ids: list[int]
    response_ids: list[int]
    response_mask: list[int]
    response_logprobs: list[float] | None
    num_turns: int
    metrics: dict[str, float] = field(default_factory=dict)
    turn_metrics: list[dict[str, Any]] = field(default_factory=list)
    reward_score: float | None = None
    extra_fields: dict[str, Any] = field(default_factory=dict)
    response_versions: list[int] | None = None

    def __post_init__(self) -> None:
        n = len(self.response_ids)
        optional = (self.response_logprobs, self.response_versions)
        if len(self.response_mask) != n or any(x is not None and len(x) != n for x in optional):
            raise ValueError(
                f"AgentLoopOutput: response_ids ({n}), response_mask ({len(self.response_mask)}), "
                f"response_logprobs ({None if self.response_logprobs is None else len(self.response_logprobs)}) "
                f"and response_versions ({None if self.response_versions is None else len(self.response_versions)}) "
                "must have the same length"
            )


class Trajectory:
    """Accumulates response tokens with their mask, log-probs and (when every model turn reports them)
    the weights version of each token (-1 on environment tokens)."""

    def __init__(self, prompt_ids: list[int]):
        self.prompt_ids = list(prompt_ids)
        self.response_ids: list[int] = []
        self.response_mask: list[int] = []
        self.response_logprobs: list[float] = []
        self._versions: list[int] = []
        self._versioned = True

    def add_model(self, out: TokenOutput) -> None:
        self.response_ids += out.token_ids
        self.response_mask += [1] * len(out.token_ids)
        self.response_logprobs += list(out.log_probs)
        if out.versions is None:
            self._versioned = False
        else:
            self._versions += list(out.versions)

    def add_env(self, ids: list[int]) -> None:
        self.response_ids += ids
        self.response_mask += [0] * len(ids)
        self.response_logprobs += [0.0] * len(ids)
        self._versions += [-1] * len(ids)

    @property
    def response_versions(self) -> list[int] | None:
        """Each response token's weights version (-1: environment), or None when a turn had none."""
        return list(self._versions) if self._versioned and self.response_ids else None

    @property
    def all_ids(self) -> list[int]:
        return self.prompt_ids + self.response_ids


class AgentLoopBase(ABC):
    """Base class of agent loops.

    Args:
        config: ``actor_rollout_ref.rollout`` (reads ``response_length``, ``multi_turn.*``).
        server: the policy's async generate interface.
        tokenizer: the policy's tokenizer (its chat template renders conversations).
    """

    def __init__(self, config: Any, server: AsyncLLMServer, tokenizer: Any, **kwargs: Any):
        self.config = config
        self.server = server
        self.tokenizer = tokenizer
        self.chat = ChatTokens(tokenizer)
        self.max_response_length = int(config.response_length)

    @staticmethod
    def turn_params(sampling_params: dict[str, Any], turn: int, max_tokens: int) -> dict[str, Any]:
        """The sampling settings of model call ``turn`` of a trajectory: ``max_tokens`` set and, when
        the row has a ``seed``, a seed of its own per call (so every call samples reproducibly)."""
        params = {**sampling_params, "max_tokens": int(max_tokens)}
        if params.get("seed") is not None:
            params["seed"] = (int(params["seed"]) + 1_000_003 * turn) % (2**63 - 1)
        return params

    @abstractmethod
    async def run(self, sampling_params: dict[str, Any], **row_fields: Any) -> AgentLoopOutput:
        """Roll out one row; ``row_fields`` are the row's non-tensor fields (``raw_prompt``, ...)."""


def register_agent_loop(name: str):
    """Class decorator: make a loop available as ``agent_name == name``."""

    def deco(cls: type[AgentLoopBase]) -> type[AgentLoopBase]:
        if not issubclass(cls, AgentLoopBase):
            raise TypeError(f"agent loop {name!r}: {cls.__qualname__} must subclass AgentLoopBase")
        AGENT_LOOPS.register(name, cls)
        return cls

    return deco


@register_agent_loop("single_turn_agent")
class SingleTurnAgentLoop(AgentLoopBase):
    """One model turn on the rendered prompt (the chat-template version of plain generation)."""

    async def run(self, sampling_params: dict[str, Any], **row_fields: Any) -> AgentLoopOutput:
        messages = list(row_fields["raw_prompt"])
        traj = Trajectory(self.chat.prompt_ids(messages))
        out = await self.server.generate(
            traj.prompt_ids,
            self.turn_params(sampling_params, 0, self.max_response_length),
            str(row_fields.get("request_id", "")),
        )
        traj.add_model(out)
        exceeded = float(out.stop_reason == "length")
        return AgentLoopOutput(
            prompt_ids=traj.prompt_ids,
            response_ids=traj.response_ids,
            response_mask=traj.response_mask,
            response_logprobs=traj.response_logprobs,
            num_turns=2,
            metrics={"assistant_turns": 1.0, "response_length_exceeded": exceeded},
            turn_metrics=[{"role": "assistant", "num_tokens": len(out.token_ids)}],
            extra_fields={"stop_reason": "response_length" if exceeded else "done"},
            response_versions=traj.response_versions,
        )
