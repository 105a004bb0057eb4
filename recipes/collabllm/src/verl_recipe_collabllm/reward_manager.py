"""``collabllm``: the multiturn-aware reward (MR) manager (upstream: ``CollabLLMRewardManager``).

A trajectory is one trained assistant turn; ``collabllm_agent`` sampled R future conversations from it
(the batch's ``messages`` column, ``{"messages": [conv_1, ..., conv_R]}``). Each conversation is scored
by every metric named in ``metric_weights`` (`verl_recipe_collabllm.metrics`) and the turn's reward is

    MR = sum over metrics m of  clip(w_m * mean_j score_m(conv_j), -1, 1)

(upstream's aggregation: the weighted mean over the futures, clipped per metric, summed), placed on the
turn's last token. Options (``reward.reward_kwargs``)::

    metric_weights: {accuracy: 1, interactivity: 1, token_amount: -1.0e-4}   # required, non-empty
    llm_judge_kwargs: {model: gpt-4o-mini, api_base: ..., api_key_env: ..., max_tokens: 1024, temperature: 0}
                         # the judge's ChatClient (litellm's key names); required by judged metrics
    accuracy_scorer: llm_judge        # upstream: the judge compares with the ground truth; rule: the row's scorer
    completion_extraction: llm_judge  # upstream: the judge extracts the final completion; last_message
    bleu_unit: char                   # upstream (nltk on strings): characters; word
    count_errors_as_zero: false   # a metric that fails (judge unreachable after its retries, an
                                  # unparseable verdict, a scorer error) scores 0 instead of stopping
    reward_score_weight / tool_reward_weight / turn_score_weight   # agent rewards, as every manager

``compute_score`` (a custom reward function, else verl-rewards' ``default_compute_score``) is what
``accuracy`` calls; ``score_kwargs`` reach it (and the sandbox reaches ``pass_rate``). Per-row extra info:
``score`` (the MR), each metric's unweighted mean over the futures, ``first_turn_question`` and
``num_conversations``. Metrics: ``collabllm/{opening,later}/<key>``, the means of those over the rows
whose trained turn opens the conversation (the prompt has no assistant message) or continues it,
``collabllm/{opening,later}/rows``, ``collabllm/metric_errors``, ``collabllm/judge_calls`` / ``judge_retries``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch
from verl.registries import REWARD_MANAGERS
from verl.rewards.managers.agent_rewards import (
    AgentRewardWeights,
    add_agent_rewards,
    last_assistant_positions,
)
from verl.rewards.models.chat_client import ChatClient

from verl_recipe_collabllm.metrics import (
    METRICS,
    Conversation,
    MetricContext,
    MetricOptions,
    first_turn_question,
)


def multiturn_aware_reward(
    scores: Mapping[str, list[float]], weights: Mapping[str, float]
) -> tuple[float, dict[str, float]]:
    """``(MR, {metric: clipped weighted mean})`` for one turn: ``scores[m]`` holds metric m of each future
    conversation. Each metric contributes ``clip(w_m * mean(scores[m]), -1, 1)``."""
    parts = {}
    for m, w in weights.items():
        values = scores[m]
        if not values:
            raise ValueError(f"metric {m!r}: no conversation scored; a turn needs at least one")
        parts[m] = min(1.0, max(-1.0, float(w) * float(np.mean(values))))
    return float(sum(parts.values())), parts


def check_reward_kwargs(
    metric_weights: Any,
    llm_judge_kwargs: Any,
    normalize_by_data_source: Any = False,
    options: MetricOptions | None = None,
) -> list[str]:
    """Problems with the manager's options, in the config's terms (also used by config validation)."""
    where = "reward.reward_kwargs"
    options = options or MetricOptions()
    problems = options.problems(where)
    if not isinstance(metric_weights, Mapping) or not metric_weights:
        problems.append(
            f"{where}.metric_weights must map metric names to weights, e.g. {{accuracy: 1, interactivity: 1, "
            f"token_amount: -1.0e-4}}; got {metric_weights!r}. Metrics: {METRICS.names()}"
        )
        metric_weights = {}
    for name, weight in metric_weights.items():
        if name not in METRICS:
            problems.append(f"{where}.metric_weights.{name}: unknown metric; known: {METRICS.names()}")
        elif not isinstance(weight, int | float) or isinstance(weight, bool):
            problems.append(f"{where}.metric_weights.{name}={weight!r} must be a number")
    judged = [] if problems else [m for m in metric_weights if m in METRICS and METRICS.get(m).needs_judge(options)]
    if judged and not llm_judge_kwargs:
        problems.append(
            f"{where}.metric_weights has {judged}, which ask an LLM judge (accuracy_scorer="
            f"{options.accuracy_scorer}, completion_extraction={options.completion_extraction}): set "
            f"{where}.llm_judge_kwargs ({{model, api_base, api_key_env, ...}}), or the rule variants "
            "accuracy_scorer=rule / completion_extraction=last_message"
        )
    if llm_judge_kwargs is not None and not isinstance(llm_judge_kwargs, Mapping):
        problems.append(f"{where}.llm_judge_kwargs must be a mapping, got {llm_judge_kwargs!r}")
    if normalize_by_data_source:
        problems.append(
            f"{where}.normalize_by_data_source=true is not implemented (upstream's manager accepts the flag and "
            "ignores it); remove it"
        )
    return problems


@REWARD_MANAGERS.register("collabllm")
class CollabLLMRewardManager:
    """See the module doc. Built as ``cls(tokenizer, num_examine, compute_score=..., reward_fn_key=...,
    **reward_kwargs)`` by the reward loader; called as ``manager(data, return_dict=False)``."""

    def __init__(
        self,
        tokenizer: Any,
        num_examine: int,
        compute_score: Callable[..., Any] | None = None,
        reward_fn_key: str = "data_source",
        metric_weights: Mapping[str, float] | None = None,
        llm_judge_kwargs: Mapping[str, Any] | None = None,
        normalize_by_data_source: bool = False,
        accuracy_scorer: str = "llm_judge",
        completion_extraction: str = "llm_judge",
        bleu_unit: str = "char",
        count_errors_as_zero: bool = False,
        score_kwargs: dict | None = None,
        reward_score_weight: float = 1.0,
        tool_reward_weight: float = 1.0,
        turn_score_weight: float = 0.0,
    ):
        options = MetricOptions(str(accuracy_scorer), str(completion_extraction), str(bleu_unit))
        problems = check_reward_kwargs(metric_weights, llm_judge_kwargs, normalize_by_data_source, options)
        if problems:
            raise ValueError("collabllm reward manager: " + "; ".join(problems))
        from verl.rewards.scoring import default_compute_score

        self.tokenizer = tokenizer
        self.num_examine = int(num_examine)
        self.reward_fn_key = reward_fn_key
        self.metric_weights = {str(k): float(v) for k, v in metric_weights.items()}
        self.count_errors_as_zero = bool(count_errors_as_zero)
        judge = None
        if llm_judge_kwargs:
            judge = ChatClient.from_kwargs(
                dict(llm_judge_kwargs), where="reward.reward_kwargs.llm_judge_kwargs"
            )
        self.ctx = MetricContext(compute_score or default_compute_score, dict(score_kwargs or {}), judge, options)
        self.agent_weights = AgentRewardWeights(
            float(reward_score_weight), float(tool_reward_weight), float(turn_score_weight)
        )

    # ------------------------------------------------------------------------------------------ scoring
    def conversations(self, data) -> list[list[Conversation]]:
        """Per row, its conversations (from the ``messages`` column the agent loop wrote)."""
        nt = data.non_tensor_batch
        for key in ("messages", "raw_prompt", self.reward_fn_key, "reward_model"):
            if key not in nt:
                raise KeyError(
                    f"collabllm reward manager: the batch has no {key!r} column (keys: {sorted(nt)}); it scores "
                    "rollouts of the collabllm_agent loop (rollout.agent.default_agent_loop=collabllm_agent)"
                )
        rows = []
        for i in range(len(data)):
            entry = nt["messages"][i]
            if not isinstance(entry, Mapping) or not entry.get("messages"):
                raise ValueError(
                    f"row {i}: 'messages' must be {{'messages': [conversation, ...]}} from collabllm_agent, got "
                    f"{type(entry).__name__}"
                )
            extra = dict(nt["extra_info"][i] or {}) if "extra_info" in nt else {}
            rows.append(
                [
                    Conversation(
                        list(conv),
                        len(nt["raw_prompt"][i]),
                        str(nt[self.reward_fn_key][i]),
                        nt["reward_model"][i]["ground_truth"],
                        extra,
                    )
                    for conv in entry["messages"]
                ]
            )
        return rows

    async def _score(self, rows: list[list[Conversation]]) -> tuple[list[dict[str, list[float]]], list[str]]:
        jobs = [
            (i, j, m, c)
            for i, convs in enumerate(rows)
            for j, c in enumerate(convs)
            for m in self.metric_weights
        ]
        values = await asyncio.gather(
            *(METRICS.get(m).fn(c, self.ctx) for _, _, m, c in jobs), return_exceptions=True
        )
        errors: list[str] = []
        scores: list[dict[str, list[float]]] = [{m: [] for m in self.metric_weights} for _ in rows]
        # Failures are looked at in row order (not completion order), so the error reported is reproducible.
        for (i, j, m, _), v in zip(jobs, values):
            if isinstance(v, BaseException):
                if not self.count_errors_as_zero:
                    raise RuntimeError(
                        f"collabllm metric {m!r} failed on row {i}, conversation {j}: {type(v).__name__}: {v}. "
                        "Set reward.reward_kwargs.count_errors_as_zero=true to score such conversations 0"
                    ) from v
                errors.append(f"row {i} conversation {j} {m}: {type(v).__name__}: {v}")
                v = 0.0
            scores[i][m].append(float(v))
        return scores, errors

    def __call__(self, data, return_dict: bool = False):
        rows = self.conversations(data)
        judge_before = dict(self.ctx.judge.stats) if self.ctx.judge is not None else None
        scores, errors = asyncio.run(self._score(rows))
        mrs = [multiturn_aware_reward(s, self.metric_weights)[0] for s in scores]

        responses = data.batch["responses"]
        reward = torch.zeros(responses.shape, dtype=torch.float32, device=responses.device)
        last = last_assistant_positions(data).tolist()
        for i, mr in enumerate(mrs):
            reward[i, last[i]] = mr
        metrics = add_agent_rewards(data, reward, self.agent_weights)
        extra: dict[str, list] = {"score": mrs}
        for m in self.metric_weights:
            extra[m] = [float(np.mean(s[m])) for s in scores]
        extra["first_turn_question"] = [first_turn_question(convs[0]) for convs in rows]
        extra["num_conversations"] = [len(convs) for convs in rows]
        # Batch means by where the trained turn sits: "opening" rows start from the request (the prompt has
        # no assistant message: asking a clarifying question is possible there), "later" rows continue
        # a conversation (the paper's datasets hold both).
        opening = [
            "assistant" not in {m["role"] for m in convs[0].messages[: convs[0].num_prompt_messages]}
            for convs in rows
        ]
        for group, members in (
            ("opening", [i for i, o in enumerate(opening) if o]),
            ("later", [i for i, o in enumerate(opening) if not o]),
        ):
            if members:
                for key, values in extra.items():
                    if key != "num_conversations":
                        metrics[f"collabllm/{group}/{key}"] = float(np.mean([values[i] for i in members]))
                metrics[f"collabllm/{group}/rows"] = float(len(members))
        metrics["collabllm/metric_errors"] = float(len(errors))
        if judge_before is not None:
            now = self.ctx.judge.stats
            metrics["collabllm/judge_calls"] = float(now["calls"] - judge_before["calls"])
            metrics["collabllm/judge_retries"] = float(now["retries"] - judge_before["retries"])
        self._examine(rows, mrs)
        if not return_dict:
            return reward
        return {"reward_tensor": reward, "reward_extra_info": extra, "reward_metrics": metrics}

    def _examine(self, rows: list[list[Conversation]], mrs: list[float]) -> None:
        shown: dict[str, int] = {}
        for convs, mr in zip(rows, mrs):
            source = convs[0].data_source
            if shown.get(source, 0) >= self.num_examine:
                continue
            shown[source] = shown.get(source, 0) + 1
            print(f"[conversation 1 of {len(convs)}] {convs[0].messages}\n[MR] {mr}", flush=True)
