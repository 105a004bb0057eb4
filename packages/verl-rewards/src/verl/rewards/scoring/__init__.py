"""Rule scorers and the upstream-compatible entry point `default_compute_score`.

A scorer has the signature ``compute_score(data_source, solution_str, ground_truth, extra_info=None,
**kwargs) -> float | dict`` (a dict always has ``score``; its other keys become per-sample extra
info). The built-in code and math scorers return dicts with a ``verdict``: why the sample got its
score (`verl.rewards.scoring.verdicts`). `SCORERS` maps a ``data_source`` to its scorer; `register_scorer` adds one. Besides exact
names, ``aime*`` routes to DAPO math and ``reasoning_gym/<task>`` to reasoning_gym's scorer for
``<task>``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from verl.utils.registry import Registry

Scorer = Callable[..., "float | dict"]
SCORERS: Registry[Scorer] = Registry("scorer")

GSM8K_SOURCES = ("openai/gsm8k",)
MATH_SOURCES = ("lighteval/MATH", "DigitalLearningGmbH/MATH-lighteval", "HuggingFaceH4/MATH-500")
DAPO_SOURCES = ("math_dapo",)
CODE_SOURCES = ("codecontests", "apps", "taco", "codeforces", "livecodebench", "humaneval", "mbpp")
PATTERNS = ("aime*", "reasoning_gym/<task>")


def register_scorer(*data_sources: str) -> Callable[[Scorer], Scorer]:
    """``@register_scorer("my_source", ...)``: route these data sources to the decorated scorer."""

    def add(fn: Scorer) -> Scorer:
        for ds in data_sources:
            SCORERS.register(ds, fn)
        return fn

    return add


@register_scorer(*GSM8K_SOURCES)
def gsm8k_scorer(data_source, solution_str, ground_truth, extra_info=None, method="strict", **kwargs) -> dict:
    from verl.rewards.scoring import gsm8k

    return gsm8k.grade(solution_str, ground_truth, method=method)


@register_scorer(*MATH_SOURCES)
def math_scorer(data_source, solution_str, ground_truth, extra_info=None, timeout=None, **kwargs) -> dict:
    from verl.rewards.scoring import math_equiv

    return math_equiv.grade(solution_str, ground_truth, timeout=timeout or math_equiv.DEFAULT_TIMEOUT)


@register_scorer(*DAPO_SOURCES)
def dapo_scorer(
    data_source, solution_str, ground_truth, extra_info=None, timeout=None, strict_box_verify=False, **kwargs
) -> dict:
    from verl.rewards.scoring import dapo_math, math_equiv

    return dapo_math.compute_score(
        solution_str, ground_truth, timeout=timeout or math_equiv.DEFAULT_TIMEOUT, strict_box_verify=strict_box_verify
    )


@register_scorer(*CODE_SOURCES)
def code_scorer(
    data_source, solution_str, ground_truth, extra_info=None, sandbox=None, sandbox_options=None,
    code_timeout=None, memory_mb=None, **kwargs,
) -> dict:  # fmt: skip
    """``sandbox``: a Sandbox or a registered name (default local), built with ``sandbox_options``;
    ``code_timeout`` (per case, or per program for assert-style tests), ``memory_mb``."""
    from verl.rewards.scoring import code

    return code.compute_score(
        solution_str, ground_truth, extra_info, sandbox=sandbox, sandbox_options=sandbox_options,
        timeout=code_timeout, memory_mb=memory_mb,
    )  # fmt: skip


@register_scorer("arithmetic")
def arithmetic_scorer(data_source, solution_str, ground_truth, extra_info=None, **kwargs) -> dict:
    from verl.rewards.scoring import arithmetic

    return arithmetic.grade(solution_str, ground_truth)


def reasoning_gym_scorer(data_source, solution_str, ground_truth, extra_info=None, **kwargs) -> float:
    from verl.rewards.scoring import rg_tasks

    return rg_tasks.compute_score(data_source.split("/", 1)[1], solution_str, ground_truth, extra_info)


def get_scorer(data_source: str) -> Scorer:
    """The scorer for a data source; unknown sources raise naming the known ones."""
    if data_source in SCORERS:
        return SCORERS.get(data_source)
    if data_source.startswith("aime"):
        return dapo_scorer
    if data_source.startswith("reasoning_gym/") and len(data_source) > len("reasoning_gym/"):
        return reasoning_gym_scorer
    raise ValueError(
        f"no scorer for data_source {data_source!r}; known: {', '.join(SCORERS.names())}; patterns: "
        f"{', '.join(PATTERNS)}. Register one with verl.rewards.register_scorer or set "
        "reward.custom_reward_function.path"
    )


def default_compute_score(
    data_source: str, solution_str: str, ground_truth: Any, extra_info: dict | None = None, **kwargs: Any
) -> float | dict:
    """Score one response by routing on ``data_source`` (upstream-compatible signature)."""
    return get_scorer(data_source)(data_source, solution_str, ground_truth, extra_info, **kwargs)


__all__ = ["SCORERS", "default_compute_score", "get_scorer", "register_scorer"]
