"""The simulated user (upstream: ``CollabLLMInteraction``, interaction name ``collabllm``).

An LLM role-plays the user: it sees the complete request the row's prompt only partly states
(``interaction_kwargs.single_turn_prompt``), a short task description (``task_desc``) and the chat so
far, and answers with a JSON object ``{"current_answer", "thought", "response"}``; ``response`` is the
user's next message, or the termination signal when the user is done. The model is any
OpenAI-compatible chat endpoint, called through verl-rewards' `ChatClient` (time-outs, retries with
backoff, a concurrency limit).

Interaction YAML (``actor_rollout_ref.rollout.multi_turn.interaction_config_path``)::

    interaction:
      - name: collabllm
        class_name: verl_recipe_collabllm.interaction.CollabLLMInteraction
        config:
          user_model: gpt-4o-mini         # the served model name (upstream's key)
          api_base: https://api.openai.com/v1
          api_key_env: OPENAI_API_KEY     # the variable holding the key (never the key itself)
          num_retries: 5                  # calls until a reply parses (upstream's meaning here)
          max_tokens: 512
          temperature: 1.0
          enable_log: false               # log every simulated user turn (logger INFO)
          # also: termination_signal, timeout, max_retries (transport), backoff, max_backoff,
          # max_concurrency, top_p, seed, stop, extra_body (see verl.rewards.models.chat_client)

A reply that does not parse after ``num_retries`` calls ends that conversation (``terminate`` with an
empty message; the reason is in the extra dict and the loop's metrics) rather than the training run.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from verl.agent.interactions.base import BaseInteraction
from verl.registries import INTERACTIONS
from verl.rewards.models.chat_client import ChatClient

logger = logging.getLogger(__name__)

TERMINATION_SIGNAL = "[[TERMINATE CHAT]]"
DEFAULT_TASK_DESC = "general assistance task"

# Section markers of the simulator prompt (a rule-based simulator reads them; see sim_server).
TASK_START, TASK_END = "<<task description>>", "<</task description>>"
GOAL_START, GOAL_END = "<<complete request (hidden from the assistant)>>", "<</complete request>>"
CHAT_START, CHAT_END = "<<conversation so far>>", "<</conversation so far>>"

USER_PROMPT_TEMPLATE = f"""You play a human USER who works with an AI assistant on a task. Write the \
user's next message in this conversation, the way a real person would.

{TASK_START}
{{task_desc}}
{TASK_END}

{GOAL_START}
{{single_turn_prompt}}
{GOAL_END}

{CHAT_START}
{{chat_history}}
{CHAT_END}

How to play the user:
- You are a person, not an AI. Keep one consistent voice.
- Save effort: say little at first and leave details out; give a detail when the assistant asks for it.
- Stay on your goal; bring the conversation back when it drifts.
- Judge the assistant's answers by what you want, as far as a person with your knowledge would notice.
- When you have what you wanted, or the assistant cannot help, answer exactly {{termination_signal}}.

Reply with one JSON object and nothing else:
{{{{"current_answer": "<the assistant's current solution, briefly>", "thought": "<what you, the user, think \
and want next>", "response": "<your next message to the assistant>"}}}}
"""

_ROLE_NAMES = {"user": "User", "assistant": "Assistant", "tool": "Tool"}


def format_chat(messages: list[dict[str, Any]]) -> str:
    """The conversation as the simulator (and the judge) read it: ``**Role**: content`` per message,
    system messages left out (they address the assistant, not the user)."""
    return "\n".join(
        f"**{_ROLE_NAMES.get(m['role'], m['role'].capitalize())}**: {m['content']}"
        for m in messages
        if m["role"] != "system"
    )


def parse_json_object(text: str) -> dict[str, Any]:
    """The JSON object in an LLM reply (from the first ``{`` to the last ``}``: models often wrap it in
    prose or a code fence). Raises ValueError saying what was wrong."""
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end <= start:
        raise ValueError(f"no JSON object in the reply: {text[:200]!r}")
    try:
        obj = json.loads(text[start : end + 1])
    except json.JSONDecodeError as e:
        raise ValueError(f"the reply's JSON does not parse ({e}): {text[start : start + 200]!r}") from e
    if not isinstance(obj, dict):
        raise ValueError(f"the reply's JSON is a {type(obj).__name__}, not an object: {text[:200]!r}")
    return obj


@INTERACTIONS.register("collabllm")
class CollabLLMInteraction(BaseInteraction):
    """See the module doc. One instance serves many concurrent conversations (state per instance id)."""

    def __init__(self, config: dict[str, Any] | None = None):
        super().__init__(config)
        cfg = dict(self.config)
        cfg.pop("name", None)
        where = f"interaction {self.name!r} config"
        if "user_model" not in cfg:
            raise ValueError(f"{where}: user_model (the served model name of the user simulator) is required")
        self.termination_signal = str(cfg.pop("termination_signal", TERMINATION_SIGNAL))
        self.num_retries = int(cfg.pop("num_retries", 3))
        if self.num_retries < 1:
            raise ValueError(
                f"{where}: num_retries={self.num_retries} must be >= 1 (calls until a reply parses)"
            )
        self.enable_log = bool(cfg.pop("enable_log", False))
        cfg["model"] = cfg.pop("user_model")
        self.client = ChatClient.from_kwargs(cfg, where=where)

    async def start_interaction(self, instance_id: str | None = None, **kwargs: Any) -> str:
        if not kwargs.get("single_turn_prompt"):
            raise ValueError(
                "the collabllm interaction needs interaction_kwargs.single_turn_prompt (the complete request the "
                f"simulated user has in mind) in every row; got keys {sorted(kwargs)}"
            )
        return await super().start_interaction(instance_id, **kwargs)

    def build_prompt(self, instance_id: str, messages: list[dict[str, Any]]) -> str:
        state = self._instances[instance_id]
        return USER_PROMPT_TEMPLATE.format(
            task_desc=state.get("task_desc") or DEFAULT_TASK_DESC,
            single_turn_prompt=state["single_turn_prompt"],
            chat_history=format_chat(messages),
            termination_signal=self.termination_signal,
        )

    async def generate_response(
        self, instance_id: str, messages: list[dict[str, Any]], **kwargs: Any
    ) -> tuple[bool, str, float, dict[str, Any]]:
        if not messages or messages[-1]["role"] != "assistant":
            raise ValueError(
                "the simulated user answers an assistant message; the conversation ends with "
                f"{messages[-1]['role'] if messages else 'nothing'!r}"
            )
        prompt = self.build_prompt(instance_id, messages)
        errors: list[str] = []
        for _ in range(self.num_retries):
            reply = await self.client.achat([{"role": "user", "content": prompt}])
            try:
                obj = parse_json_object(reply)
                if not isinstance(obj.get("response"), str):
                    raise ValueError(f"no string 'response' in {sorted(obj)}: {reply[:200]!r}")
            except ValueError as e:
                errors.append(str(e))
                continue
            response = obj["response"].strip()
            if self.enable_log:
                logger.info(
                    "simulated user (%s): %s | thought: %s", instance_id, response, obj.get("thought")
                )
            return self.termination_signal in response, response, 0.0, {"thought": obj.get("thought")}
        logger.warning(
            "simulated user (%s): no parseable reply in %d call(s); ending the conversation. Last problem: %s",
            instance_id,
            self.num_retries,
            errors[-1],
        )
        return True, "", 0.0, {"parse_failed": True, "error": errors[-1]}
