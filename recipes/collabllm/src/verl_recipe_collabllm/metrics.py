"""Conversation-level metrics the multiturn-aware reward is made of (upstream's names).

Each metric scores one conversation (the prompt, the trained assistant turn and its sampled future)
and is chosen by name in ``reward.reward_kwargs.metric_weights``:

- ``accuracy``: verl-rewards' scorer for the row's ``data_source`` (or the custom reward function) on
  the final completion, against ``reward_model.ground_truth``; a dict result gives its ``score``.
  (Upstream asks an LLM judge whether the final answer matches the reference; here the rule scorers
  decide, e.g. ``lighteval/MATH`` compares ``\\boxed{}`` answers.)
- ``interactivity``: the LLM judge (``llm_judge_kwargs``) rates the assistant's engagement in [0, 1]:
  the mean of understanding/clarity, clarifying questions and helpful suggestions (upstream's rubric),
  answered as JSON ``{"thought", "interactivity"}``.
- ``token_amount``: the number of words (whitespace-separated) in every message after the prompt,
  the trained turn included (upstream's count); weighted negatively it is the paper's efficiency cost.
- ``bleu_score``: sentence BLEU-4 of the final completion against the ground truth, on words (uniform
  weights, brevity penalty, no smoothing: 0 when some n-gram order has no match).
- ``pass_rate``: verl-rewards' code scorer on the final completion's last code block against the
  HumanEval-style tests in ``extra_info.single_turn_metadata`` (``test``, ``entry_point``: upstream's
  BigCodeBench field), in ``reward.sandbox``; the share of tests passed.

The final completion is the last assistant message (upstream asks the judge to merge the assistant's
revisions into one document; the last message is what the user leaves with).
"""

from __future__ import annotations

import asyncio
import math
import re
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from verl.rewards.models.chat_client import ChatClient
from verl.utils.registry import Registry

from verl_recipe_collabllm.interaction import format_chat, parse_json_object


@dataclass
class Conversation:
    """One conversation to score, with the row it came from."""

    messages: list[dict[str, Any]]
    num_prompt_messages: int
    data_source: str
    ground_truth: Any
    extra_info: dict[str, Any] = field(default_factory=dict)

    @property
    def future(self) -> list[dict[str, Any]]:
        """The messages after the prompt: the trained turn and everything after it."""
        return self.messages[self.num_prompt_messages :]

    @property
    def final_completion(self) -> str:
        return next((m["content"] for m in reversed(self.future) if m["role"] == "assistant"), "")


@dataclass
class MetricContext:
    """What metrics may use: the scorer (``accuracy``), its keyword arguments (e.g. the sandbox), the judge."""

    compute_score: Callable[..., Any]
    score_kwargs: dict[str, Any] = field(default_factory=dict)
    judge: ChatClient | None = None


@dataclass(frozen=True)
class Metric:
    fn: Callable[[Conversation, MetricContext], Awaitable[float]]
    needs_judge: bool = False


METRICS: Registry[Metric] = Registry("collabllm metric")


def register_metric(name: str, needs_judge: bool = False):
    def deco(fn: Callable[[Conversation, MetricContext], Awaitable[float]]):
        METRICS.register(name, Metric(fn, needs_judge))
        return fn

    return deco


# ------------------------------------------------------------------------------------------ rule metrics
@register_metric("accuracy")
async def accuracy(conv: Conversation, ctx: MetricContext) -> float:
    result = await asyncio.to_thread(
        ctx.compute_score,
        data_source=conv.data_source,
        solution_str=conv.final_completion,
        ground_truth=conv.ground_truth,
        extra_info=conv.extra_info,
        **ctx.score_kwargs,
    )
    return float(result["score"]) if isinstance(result, dict) else float(result)


@register_metric("token_amount")
async def token_amount(conv: Conversation, ctx: MetricContext) -> float:
    return float(sum(len(str(m["content"]).split()) for m in conv.future))


def bleu(candidate: str, reference: str, max_order: int = 4) -> float:
    """Sentence BLEU of ``candidate`` against one ``reference``, on whitespace words: the geometric mean
    of the clipped n-gram precisions (n = 1..max_order) times the brevity penalty
    ``exp(1 - len(ref) / len(cand))`` when the candidate is shorter. 0 when an order has no match."""
    cand, ref = candidate.split(), reference.split()
    if not cand:
        return 0.0
    log_precisions = []
    for n in range(1, max_order + 1):
        c_grams = Counter(tuple(cand[i : i + n]) for i in range(len(cand) - n + 1))
        r_grams = Counter(tuple(ref[i : i + n]) for i in range(len(ref) - n + 1))
        total = sum(c_grams.values())
        matched = sum(min(k, r_grams[g]) for g, k in c_grams.items())
        if total == 0 or matched == 0:
            return 0.0
        log_precisions.append(math.log(matched / total))
    brevity = 1.0 if len(cand) > len(ref) else math.exp(1.0 - len(ref) / len(cand))
    return brevity * math.exp(sum(log_precisions) / max_order)


@register_metric("bleu_score")
async def bleu_score(conv: Conversation, ctx: MetricContext) -> float:
    return bleu(conv.final_completion, str(conv.ground_truth))


@register_metric("pass_rate")
async def pass_rate(conv: Conversation, ctx: MetricContext) -> float:
    from verl.rewards.scoring import code

    tests = (conv.extra_info or {}).get("single_turn_metadata")
    if not isinstance(tests, dict) or "test" not in tests or "entry_point" not in tests:
        raise ValueError(
            "pass_rate needs extra_info.single_turn_metadata with 'test' (defining check(candidate)) and "
            f"'entry_point'; got {type(tests).__name__}"
            + (f" with keys {sorted(tests)}" if isinstance(tests, dict) else "")
        )
    sandbox = {k: ctx.score_kwargs[k] for k in ("sandbox", "sandbox_options") if k in ctx.score_kwargs}
    result = await asyncio.to_thread(
        code.compute_score,
        conv.final_completion,
        {"test": tests["test"], "entry_point": tests["entry_point"]},
        conv.extra_info,
        **sandbox,
    )
    return float(result["pass_rate"])


# ------------------------------------------------------------------------------------------ judged metrics
INTERACTIVITY_PROMPT = """You evaluate how interactive an AI assistant is in a conversation with a user.

<<conversation>>
{chat_history}
<</conversation>>

Rate three things, each from 0 to 1:
- U, understanding and clarity: 1 = grasps what the user wants and answers clearly; 0.7 = mostly; \
0.3 = partly misunderstands or is hard to follow; 0 = misunderstands or is unclear.
- Q, clarification: 1 = asks the precise questions that are needed, when they are needed; 0.7 = helpful \
but incomplete questions; 0.3 = only generic questions ("Does that help?"); 0 = none where needed.
- S, suggestions: 1 = useful, actionable suggestions; 0.7 = somewhat helpful; 0.3 = vague; 0 = none \
where they would clearly help.
The interactivity score is the average of U, Q and S.

Reply with one JSON object and nothing else:
{{"thought": "<your reasoning>", "interactivity": <score between 0 and 1>}}
"""


@register_metric("interactivity", needs_judge=True)
async def interactivity(conv: Conversation, ctx: MetricContext) -> float:
    prompt = INTERACTIVITY_PROMPT.format(chat_history=format_chat(conv.messages))
    reply = await ctx.judge.achat([{"role": "user", "content": prompt}])
    obj = parse_json_object(reply)
    try:
        value = float(obj["interactivity"])
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"interactivity judge: no number under 'interactivity' in {reply[:200]!r}") from e
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"interactivity judge: score {value} is outside [0, 1] in {reply[:200]!r}")
    return value


def first_turn_question(conv: Conversation) -> float:
    """1.0 when the trained turn (the first assistant message after the prompt) ends with a question
    mark: the recipe's measure of "asked a clarifying question" (a diagnostic, not a reward)."""
    first = next((m["content"] for m in conv.future if m["role"] == "assistant"), "")
    return float(re.search(r"\?[\s\"')\]]*$", first) is not None)
