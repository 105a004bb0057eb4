"""Conversation-level metrics the multiturn-aware reward is made of (upstream's names).

Each metric scores one conversation (the prompt, the trained assistant turn and its sampled future)
and is chosen by name in ``reward.reward_kwargs.metric_weights``; three options of the manager
(`MetricOptions`, upstream's behaviour by default) pick how:

- ``accuracy``: ``accuracy_scorer=llm_judge`` (upstream): the LLM judge (``llm_judge_kwargs``) reads the
  target question (``extra_info.interaction_kwargs.single_turn_prompt``), the ground truth and the
  conversation and answers JSON ``{"thought", "accuracy": 0 or 1}``. ``accuracy_scorer=rule``:
  verl-rewards' scorer for the row's ``data_source`` (or the custom reward function) on the final
  completion, against ``reward_model.ground_truth``; a dict result gives its ``score``.
- ``interactivity``: the LLM judge rates the assistant's engagement in [0, 1]: the mean of
  understanding/clarity, clarifying questions and helpful suggestions (upstream's rubric), answered as
  JSON ``{"thought", "interactivity"}``.
- ``token_amount``: the number of words (whitespace-separated) in every message after the prompt,
  the trained turn included (upstream's count); weighted negatively it is the paper's efficiency cost.
- ``bleu_score``: sentence BLEU-4 of the final completion against the ground truth (uniform weights,
  brevity penalty, no smoothing: 0 when some n-gram order has no match), over characters
  (``bleu_unit=char``: upstream hands nltk two strings) or words (``bleu_unit=word``).
- ``pass_rate``: verl-rewards' code scorer on the final completion against the HumanEval-style tests in
  ``extra_info.single_turn_metadata`` (``test``, ``entry_point``: upstream's BigCodeBench field), in
  ``reward.sandbox``: 1.0 when every test passes, else 0.0 (upstream's ``passed``).

The final completion (``bleu_score``, ``pass_rate``, and ``accuracy`` with the rule scorer) is, with
``completion_extraction=llm_judge`` (upstream), what the judge extracts from the whole conversation as
the final, complete document or code, revisions merged (JSON ``{"thought", "final_completion"}``); with
``completion_extraction=last_message``, the last assistant message. The judge's JSON is read leniently as
upstream's parser does (prose around it, ``\"\"\"`` triple-quoted or single-quoted strings).
"""

from __future__ import annotations

import ast
import asyncio
import json
import math
import re
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from verl.rewards.models.chat_client import ChatClient
from verl.utils.registry import Registry

from verl_recipe_collabllm.interaction import format_chat


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


ACCURACY_SCORERS = ("llm_judge", "rule")
COMPLETION_EXTRACTIONS = ("llm_judge", "last_message")
BLEU_UNITS = ("char", "word")


@dataclass(frozen=True)
class MetricOptions:
    """How the metrics score (see the module doc); the defaults are upstream's."""

    accuracy_scorer: str = "llm_judge"
    completion_extraction: str = "llm_judge"
    bleu_unit: str = "char"

    def problems(self, where: str) -> list[str]:
        out = []
        for key, value, known in (
            ("accuracy_scorer", self.accuracy_scorer, ACCURACY_SCORERS),
            ("completion_extraction", self.completion_extraction, COMPLETION_EXTRACTIONS),
            ("bleu_unit", self.bleu_unit, BLEU_UNITS),
        ):
            if value not in known:
                out.append(f"{where}.{key}={value!r} is not one of: {', '.join(known)}")
        return out


@dataclass
class MetricContext:
    """What metrics may use: the scorer (rule ``accuracy``), its keyword arguments (e.g. the sandbox), the
    judge, and the options."""

    compute_score: Callable[..., Any]
    score_kwargs: dict[str, Any] = field(default_factory=dict)
    judge: ChatClient | None = None
    options: MetricOptions = field(default_factory=MetricOptions)


@dataclass(frozen=True)
class Metric:
    fn: Callable[[Conversation, MetricContext], Awaitable[float]]
    judged: Callable[[MetricOptions], bool] = lambda options: False

    def needs_judge(self, options: MetricOptions) -> bool:
        return self.judged(options)


METRICS: Registry[Metric] = Registry("collabllm metric")


def register_metric(name: str, judged: Callable[[MetricOptions], bool] = lambda options: False):
    def deco(fn: Callable[[Conversation, MetricContext], Awaitable[float]]):
        METRICS.register(name, Metric(fn, judged))
        return fn

    return deco


def _extracting(options: MetricOptions) -> bool:
    return options.completion_extraction == "llm_judge"


# ------------------------------------------------------------------------------------------ the judge
def parse_judge_json(text: str) -> dict[str, Any]:
    """The JSON object in a judge's reply, read as leniently as upstream's parser: the text from the first
    ``{`` to the last ``}``; triple-quoted strings (which upstream's prompts ask for) become JSON strings;
    raw newlines inside strings pass; else Python's literal syntax (single quotes)."""
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end <= start:
        raise ValueError(f"no JSON object in the judge's reply: {text[:200]!r}")
    body = text[start : end + 1]
    body = re.sub(r'"""(.*?)"""|\'\'\'(.*?)\'\'\'', lambda m: json.dumps(m.group(1) or m.group(2) or ""), body, flags=re.S)
    try:
        obj = json.loads(body, strict=False)
    except json.JSONDecodeError as e:
        try:
            obj = ast.literal_eval(body)
        except (ValueError, SyntaxError):
            raise ValueError(f"the judge's JSON does not parse ({e}): {body[:200]!r}") from e
    if not isinstance(obj, dict):
        raise ValueError(f"the judge's JSON is a {type(obj).__name__}, not an object: {text[:200]!r}")
    return obj


async def ask_judge(ctx: MetricContext, prompt: str, key: str, what: str) -> Any:
    """The judge's value under ``key`` for ``prompt`` (one user message)."""
    if ctx.judge is None:
        raise ValueError(f"{what} asks the LLM judge, but no judge is configured: set reward.reward_kwargs.llm_judge_kwargs")
    reply = await ctx.judge.achat([{"role": "user", "content": prompt}])
    obj = parse_judge_json(reply)
    if key not in obj:
        raise ValueError(f"{what}: the judge's JSON has no {key!r} (keys: {sorted(obj)}) in {reply[:200]!r}")
    return obj[key]


async def final_completion(conv: Conversation, ctx: MetricContext, kind: str) -> str:
    """The conversation's final completion (see the module doc); ``kind``: ``document`` or ``code``."""
    if not _extracting(ctx.options):
        return conv.final_completion
    prompt = EXTRACT_PROMPTS[kind].format(chat_history=format_chat(conv.messages))
    return str(await ask_judge(ctx, prompt, "final_completion", f"the {kind} extraction"))


# ------------------------------------------------------------------------------------------ metrics
ACCURACY_PROMPT = """You are a careful evaluator. Decide whether the AI assistant's final answer in a \
conversation with a user is correct.

<<target question>>
{single_turn_prompt}
<</target question>>

<<ground truth answer>>
{ground_truth}
<</ground truth answer>>

<<conversation>>
{chat_history}
<</conversation>>

Rate the assistant's final response to the target question: 1 if it is correct and consistent with the \
ground truth, 0 if it contradicts or misses it.

Reply with one JSON object and nothing else:
{{"thought": "<your reasoning>", "accuracy": <0 or 1>}}
"""


def _single_turn_prompt(conv: Conversation) -> str:
    kwargs = (conv.extra_info or {}).get("interaction_kwargs") or {}
    if "single_turn_prompt" not in kwargs:
        raise ValueError(
            "accuracy (accuracy_scorer=llm_judge) shows the judge the target question from "
            "extra_info.interaction_kwargs.single_turn_prompt, which this row lacks "
            f"(extra_info keys: {sorted(conv.extra_info or {})}); set reward.reward_kwargs.accuracy_scorer=rule "
            "to score with the data source's rule scorer"
        )
    return str(kwargs["single_turn_prompt"])


@register_metric("accuracy", judged=lambda options: options.accuracy_scorer == "llm_judge")
async def accuracy(conv: Conversation, ctx: MetricContext) -> float:
    if ctx.options.accuracy_scorer == "llm_judge":
        prompt = ACCURACY_PROMPT.format(
            single_turn_prompt=_single_turn_prompt(conv),
            ground_truth=conv.ground_truth,
            chat_history=format_chat(conv.messages),
        )
        value = await ask_judge(ctx, prompt, "accuracy", "accuracy judge")
        try:
            value = float(value)
        except (TypeError, ValueError) as e:
            raise ValueError(f"accuracy judge: {value!r} under 'accuracy' is not a number") from e
        if value not in (0.0, 1.0):
            raise ValueError(f"accuracy judge: {value} is not 0 or 1")
        return value
    result = await asyncio.to_thread(
        ctx.compute_score,
        data_source=conv.data_source,
        solution_str=await final_completion(conv, ctx, "document"),
        ground_truth=conv.ground_truth,
        extra_info=conv.extra_info,
        **ctx.score_kwargs,
    )
    return float(result["score"]) if isinstance(result, dict) else float(result)


@register_metric("token_amount")
async def token_amount(conv: Conversation, ctx: MetricContext) -> float:
    return float(sum(len(str(m["content"]).split()) for m in conv.future))


def bleu(candidate: str, reference: str, max_order: int = 4, unit: str = "word") -> float:
    """Sentence BLEU of ``candidate`` against one ``reference``, on whitespace words (``unit="word"``) or
    characters (``"char"``): the geometric mean of the clipped n-gram precisions (n = 1..max_order) times
    the brevity penalty ``exp(1 - len(ref) / len(cand))`` when the candidate is shorter. 0 when an order
    has no match."""
    if unit not in BLEU_UNITS:
        raise ValueError(f"bleu unit={unit!r} is not one of: {', '.join(BLEU_UNITS)}")
    cand, ref = (list(candidate), list(reference)) if unit == "char" else (candidate.split(), reference.split())
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


@register_metric("bleu_score", judged=_extracting)
async def bleu_score(conv: Conversation, ctx: MetricContext) -> float:
    completion = await final_completion(conv, ctx, "document")
    return bleu(completion, str(conv.ground_truth), unit=ctx.options.bleu_unit)


@register_metric("pass_rate", judged=_extracting)
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
        await final_completion(conv, ctx, "code"),
        {"test": tests["test"], "entry_point": tests["entry_point"]},
        conv.extra_info,
        **sandbox,
    )
    return float(result["pass_rate"] == 1.0)


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


@register_metric("interactivity", judged=lambda options: True)
async def interactivity(conv: Conversation, ctx: MetricContext) -> float:
    prompt = INTERACTIVITY_PROMPT.format(chat_history=format_chat(conv.messages))
    value = await ask_judge(ctx, prompt, "interactivity", "interactivity judge")
    try:
        value = float(value)
    except (TypeError, ValueError) as e:
        raise ValueError(f"interactivity judge: no number under 'interactivity': {value!r}") from e
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"interactivity judge: score {value} is outside [0, 1]")
    return value


EXTRACT_PROMPT = """You analyze a conversation between a user and an AI assistant. Extract the final, \
complete version of the {thing} the assistant produced: take every revision and addition made during the \
conversation into account and merge them into one coherent result{extra}.

<<conversation>>
{{chat_history}}
<</conversation>>

Reply with one JSON object and nothing else:
{{{{"thought": "<how the parts of the conversation make up the final version>", "final_completion": "<the \
final {thing}>"}}}}
Wrap text of several lines in triple quotes (\"\"\"), and write double quotes inside it as single quotes.
"""
EXTRACT_PROMPTS = {
    "document": EXTRACT_PROMPT.format(thing="document", extra=""),
    "code": EXTRACT_PROMPT.format(
        thing="code", extra=" (runnable: imports, functions and classes; no usage examples or main block)"
    ),
}


def first_turn_question(conv: Conversation) -> float:
    """1.0 when the trained turn (the first assistant message after the prompt) ends with a question
    mark: the recipe's measure of "asked a clarifying question" (a diagnostic, not a reward)."""
    first = next((m["content"] for m in conv.future if m["role"] == "assistant"), "")
    return float(re.search(r"\?[\s\"')\]]*$", first) is not None)
