"""The CPU default's task: products of two n-digit numbers, which a tiny model cannot work out in its head
but can with code, and its scorer.

Rows follow the parquet row contract: ``data_source="retool_arith"``, ``prompt`` one user message
(``"Compute 123*456."``; the recipe's dataset step appends upstream's answer-format instruction when the
rows are loaded, `verl_recipe_retool.dataset`), ``reward_model.ground_truth`` the product,
``agent_name="tool_agent"``. Problems are drawn with a seeded generator; train and test are disjoint.
Answers are written as upstream's ReTool asks: ``\\boxed{3717}``.

With ``retool.reward=upstream`` (the default) every row is scored by `verl_recipe_retool.reward`. The scorer
registered here for ``retool_arith`` is the ``retool.reward=final_answer`` variant: the final answer's
correctness and nothing else (the paper's description), with the same strict box check:

- ``score`` / ``acc``: 1.0 when the last ``\\boxed{...}`` equals the product exactly, else 0.0 (no bonus);
- ``tool_call`` / ``tool_correct``: the diagnostics of `tool_diagnostics`.
"""

from __future__ import annotations

import random

from verl.agent.tools.parser import TOOL_CALL_END, format_tool_call, parse_tool_calls
from verl.rewards.scoring import register_scorer
from verl.rewards.scoring.dapo_math import is_correct_strict_box

DATA_SOURCE = "retool_arith"
TOOL_NAME = "code_interpreter"


def make_rows(
    n: int, seed: int, digits: int = 3, split: str = "train", exclude: set | None = None
) -> list[dict]:
    """``n`` distinct problems ``a*b`` with ``digits``-digit ``a``, ``b`` (none of ``exclude``'s pairs)."""
    if digits < 1:
        raise ValueError(f"digits={digits}: must be >= 1")
    lo, hi = 10 ** (digits - 1), 10**digits - 1
    if n > (hi - lo + 1) ** 2 - len(exclude or ()):
        raise ValueError(f"cannot draw {n} distinct {digits}-digit problems")
    gen = random.Random(seed)
    seen = set(exclude or ())
    rows = []
    while len(rows) < n:
        a, b = gen.randint(lo, hi), gen.randint(lo, hi)
        if (a, b) in seen:
            continue
        seen.add((a, b))
        rows.append(
            {
                "data_source": DATA_SOURCE,
                "prompt": [{"role": "user", "content": f"Compute {a}*{b}."}],
                "ability": "arithmetic",
                "reward_model": {"style": "rule", "ground_truth": str(a * b)},
                "extra_info": {"split": split, "index": len(rows), "a": a, "b": b},
                "agent_name": "tool_agent",
            }
        )
    return rows


def split_rows(n_train: int, n_test: int, seed: int, digits: int) -> tuple[list[dict], list[dict]]:
    """Disjoint train and test splits."""
    train = make_rows(n_train, seed, digits, "train")
    used = {(r["extra_info"]["a"], r["extra_info"]["b"]) for r in train}
    return train, make_rows(n_test, seed + 1, digits, "test", exclude=used)


def tool_turns(row: dict) -> list[str]:
    """The assistant turns of a tool-using trace: a code call, then (after the interpreter's output)
    the answer. The answer turn is a template: the number is whatever the tool printed."""
    a, b = row["extra_info"]["a"], row["extra_info"]["b"]
    return [format_tool_call(TOOL_NAME, {"code": f"print({a}*{b})"}), "\\boxed{{{tool_output}}}"]


def direct_turns(row: dict) -> list[str]:
    """The one assistant turn of a direct-answer trace (the no-tool arm of the A/B)."""
    return [boxed(row["reward_model"]["ground_truth"])]


def boxed(answer: str) -> str:
    return "\\boxed{" + str(answer) + "}"


def _has_call(text: str) -> bool:
    parsed = parse_tool_calls(text)
    return any(c.name == TOOL_NAME and isinstance(c.arguments.get("code"), str) for c in parsed.calls)


def tool_diagnostics(solution_str: str, truth: str, acc: bool) -> dict[str, float]:
    """``tool_call``: the response holds a well-formed ``code_interpreter`` call. ``tool_correct``: the answer
    is right and came from the tool: a well-formed call, and the truth appears in the text between the last
    call and the last box (the interpreter's output), i.e. the model's code computed it and it was copied."""
    called = _has_call(solution_str)
    correct = 0.0
    if called and acc:
        after_call = solution_str[solution_str.rfind(TOOL_CALL_END) + len(TOOL_CALL_END) :]
        tool_output = after_call[: after_call.rfind("\\boxed{")]
        correct = float(truth in tool_output)
    return {"tool_call": float(called), "tool_correct": correct}


@register_scorer(DATA_SOURCE)
def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs) -> dict:
    """The ``final_answer`` variant (see the module doc)."""
    truth = str(ground_truth).strip()
    acc = float(is_correct_strict_box(solution_str, truth)[0])
    return {"score": acc, "acc": acc, **tool_diagnostics(solution_str, truth, bool(acc))}

