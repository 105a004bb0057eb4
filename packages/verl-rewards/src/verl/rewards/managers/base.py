"""Shared machinery of the reward managers: decoding rows, placing scores, errors, extra info.

A manager is built as ``Manager(tokenizer, num_examine, compute_score=None, reward_fn_key="data_source",
**kwargs)`` and called as ``manager(data, return_dict=False)`` (docs/contracts.md). It returns the
``[N, R]`` float tensor with each row's score on its last model token (the last ``response_mask``
1; in multi-turn responses tool and user tokens come after none of it), plus the rewards an agent
loop earned (`verl.rewards.managers.agent_rewards`, weighted), or with ``return_dict=True`` ``{"reward_tensor", "reward_extra_info": {key: [one value per row]},
"reward_metrics": {name: float}}``. When scorers return a ``verdict`` (why the sample got its score),
``reward_metrics`` has ``reward/verdict/<kind>``: each kind's share of the rows that have one.
"""

from __future__ import annotations

import math
import numbers
import threading
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from verl.rewards.managers.agent_rewards import (
    AgentRewardWeights,
    add_agent_rewards,
    last_assistant_positions,
)
from verl.rewards.scoring.verdicts import verdict_metrics
from verl.trainer.ppo.reward_loop import SampleScorer

# Non-tensor columns of agent rollouts the scorer also sees in extra_info (as upstream's reward loop does).
_AGENT_INFO = ("num_turns", "tool_rewards", "turn_scores")


@dataclass
class Row:
    """One decoded trajectory."""

    index: int
    prompt: str
    response: str
    valid_response_length: int
    data_source: str
    ground_truth: Any
    extra_info: dict


@dataclass
class Scored:
    """What scoring rows produced: one final score per row, extra columns (one value per row) and metrics,
    which are counts (``reward/score_errors``, ``reward/score_timeouts``): a batch scored in parts adds
    its parts' counts up (`join_scored`)."""

    scores: list[float]
    extra: dict[str, list] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass
class ScoredPart:
    """A part of a batch, decoded and scored (`RewardManagerBase.score_part`)."""

    rows: list[Row]
    scored: Scored


def join_scored(parts: list[Scored]) -> Scored:
    """The parts' scores and extra columns concatenated in order (None where a part lacks a column, as
    `RewardManagerBase.collect` fills a row lacking one), their count metrics added up."""
    if len(parts) == 1:
        return parts[0]
    keys = list(dict.fromkeys(k for part in parts for k in part.extra))
    extra = {k: [v for part in parts for v in part.extra.get(k, [None] * len(part.scores))] for k in keys}
    metrics: dict[str, float] = {}
    for part in parts:
        for k, v in part.metrics.items():
            metrics[k] = metrics.get(k, 0.0) + v
    return Scored([s for part in parts for s in part.scores], extra, metrics)


def response_lengths(data) -> torch.Tensor:
    """Valid response length per row: up to the last 1 of the response part of ``attention_mask``
    (which covers tool output inside multi-turn responses), else of ``response_mask``."""
    responses = data.batch["responses"]
    r = responses.shape[-1]
    if "attention_mask" in data.batch:
        mask = data.batch["attention_mask"][:, -r:]
    elif "response_mask" in data.batch:
        mask = data.batch["response_mask"]
    else:
        raise KeyError(
            "reward manager needs 'attention_mask' or 'response_mask' in the batch to find response lengths"
        )
    positions = torch.arange(1, r + 1, device=mask.device).expand_as(mask)
    return (positions * (mask != 0)).amax(dim=-1)


def decode_rows(data, tokenizer, reward_fn_key: str, first_row: int = 0) -> list[Row]:
    """The rows of ``data``, numbered from ``first_row`` (their place in the batch, for messages)."""
    responses = data.batch["responses"]
    lengths = response_lengths(data).tolist()
    prompts = data.batch["prompts"] if "prompts" in data.batch else None
    p = prompts.shape[-1] if prompts is not None else 0
    nt = data.non_tensor_batch
    if reward_fn_key not in nt:
        raise KeyError(
            f"reward_fn_key {reward_fn_key!r} is not a non-tensor key of the batch; keys: {sorted(nt)}"
        )
    if "reward_model" not in nt:
        raise KeyError(
            f"the batch has no 'reward_model' column (dicts with 'ground_truth'); keys: {sorted(nt)}"
        )
    # Token ids as Python lists once, then one batch_decode per side: per-row tensor decodes cost
    # ~0.1 ms each in conversions, which adds up on the driver every step.
    response_ids = [row[:n] for row, n in zip(responses.tolist(), lengths, strict=True)]
    response_texts = tokenizer.batch_decode(response_ids, skip_special_tokens=True)
    prompt_texts = [""] * len(data)
    if prompts is not None:
        if "attention_mask" in data.batch:
            keep = data.batch["attention_mask"][:, :p].bool().tolist()
            prompt_ids = [[t for t, k in zip(row, ks, strict=True) if k] for row, ks in zip(prompts.tolist(), keep, strict=True)]
        else:
            prompt_ids = prompts.tolist()
        prompt_texts = tokenizer.batch_decode(prompt_ids, skip_special_tokens=True)
    rows = []
    for i in range(len(data)):
        prompt, response = prompt_texts[i], response_texts[i]
        rm = nt["reward_model"][i]
        if not isinstance(rm, dict) or "ground_truth" not in rm:
            raise KeyError(f"row {first_row + i}: reward_model must be a dict with 'ground_truth', got {rm!r}")
        extra = dict(nt["extra_info"][i] or {}) if "extra_info" in nt else {}
        extra.update({k: nt[k][i] for k in _AGENT_INFO if k in nt})
        rows.append(
            Row(
                first_row + i,
                prompt,
                response,
                lengths[i],
                str(nt[reward_fn_key][i]),
                rm["ground_truth"],
                extra,
            )
        )
    return rows


class RewardManagerBase(SampleScorer):
    """Holds the common constructor and the ``__call__`` protocol; subclasses implement `score_rows`.

    One pass (``__call__``) and the reward loop (``score_part`` per sample, then ``assemble``) run the same
    code, so a row's score does not depend on how its batch was split.

    Args:
        tokenizer: decodes responses (and prompts, for `num_examine` printing).
        num_examine: how many rows per data source to print per call.
        compute_score: the scorer (default `verl.rewards.default_compute_score`).
        reward_fn_key: the non-tensor column holding the data source.
        count_errors_as_zero: a raising scorer scores 0 for that row (counted in
            ``reward_metrics["reward/score_errors"]``) instead of stopping with an error.
        score_kwargs: extra keyword arguments for every scorer call (e.g. the sandbox).
        combine_rm_scores: when the batch has ``rm_scores`` from a model reward model, add the rule
            scores to them (True) instead of returning ``rm_scores`` alone (upstream behaviour).
        reward_score_weight / tool_reward_weight / turn_score_weight: how much of an agent loop's
            trajectory reward / tool step rewards / interaction turn scores is added (see
            `verl.rewards.managers.agent_rewards`).
    """

    def __init__(
        self,
        tokenizer,
        num_examine: int,
        compute_score: Callable[..., Any] | None = None,
        reward_fn_key: str = "data_source",
        count_errors_as_zero: bool = False,
        score_kwargs: dict | None = None,
        combine_rm_scores: bool = False,
        reward_score_weight: float = 1.0,
        tool_reward_weight: float = 1.0,
        turn_score_weight: float = 0.0,
        **kwargs: Any,
    ):
        if kwargs:
            raise TypeError(
                f"{type(self).__name__} got unknown options {sorted(kwargs)}; it accepts compute_score, "
                "reward_fn_key, count_errors_as_zero, score_kwargs, combine_rm_scores, reward_score_weight, "
                f"tool_reward_weight, turn_score_weight{self._extra_option_names()}"
            )
        from verl.rewards.scoring import default_compute_score

        self.tokenizer = tokenizer
        self._decode_lock = threading.Lock()
        self.num_examine = int(num_examine)
        self.compute_score = compute_score or default_compute_score
        self.reward_fn_key = reward_fn_key
        self.count_errors_as_zero = bool(count_errors_as_zero)
        self.score_kwargs = dict(score_kwargs or {})
        self.combine_rm_scores = bool(combine_rm_scores)
        self.agent_weights = AgentRewardWeights(
            float(reward_score_weight), float(tool_reward_weight), float(turn_score_weight)
        )

    def _extra_option_names(self) -> str:
        return ""

    # -- subclasses ---------------------------------------------------------------------------
    def score_rows(self, rows: list[Row]) -> Scored:
        raise NotImplementedError

    # -- shared helpers -----------------------------------------------------------------------
    def score_one(self, row: Row, errors: list[str]) -> float | dict:
        """Call the scorer on one row, applying the error policy."""
        try:
            return self.compute_score(
                data_source=row.data_source,
                solution_str=row.response,
                ground_truth=row.ground_truth,
                extra_info=row.extra_info,
                **self.score_kwargs,
            )
        except Exception as e:
            if not self.count_errors_as_zero:
                raise RuntimeError(
                    f"{self._scorer_name()} failed on row {row.index} (data_source={row.data_source!r}): "
                    f"{type(e).__name__}: {e}. Set reward.reward_kwargs.count_errors_as_zero=true to score such rows 0"
                ) from e
            errors.append(f"row {row.index} ({row.data_source}): {type(e).__name__}: {e}")
            return 0.0

    def split_result(self, result: float | dict, row: Row) -> tuple[float, dict]:
        """``(score, extra columns)`` of one scorer result; a score that is not a finite number is an error
        naming the scorer, the row and the value: a NaN or a string must never become a silent reward."""
        if isinstance(result, dict):
            if "score" not in result:
                raise KeyError(
                    f"{self._scorer_name()} returned a dict without 'score' for row {row.index} "
                    f"(data_source={row.data_source!r}): {result!r:.200}"
                )
            return self._checked_score(result["score"], row), {k: v for k, v in result.items()}
        score = self._checked_score(result, row)
        return score, {"score": score}

    def _checked_score(self, value: Any, row: Row) -> float:
        numeric = isinstance(value, numbers.Real) or (isinstance(value, torch.Tensor) and value.numel() == 1)
        if not numeric or not math.isfinite(float(value)):
            raise ValueError(
                f"{self._scorer_name()} returned {value!r:.100} ({type(value).__name__}) for row {row.index} "
                f"(data_source={row.data_source!r}); a score must be a finite number (int, float, bool) or a "
                f"dict with a finite 'score'"
            )
        return float(value)

    def _scorer_name(self) -> str:
        fn = self.compute_score
        fn = getattr(fn, "func", fn)  # functools.partial (bound reward_kwargs)
        name = getattr(fn, "__qualname__", type(fn).__name__)
        code = getattr(fn, "__code__", None)
        return f"reward scorer {name}" + (f" ({code.co_filename})" if code is not None else "")

    @staticmethod
    def collect(results: list[tuple[float, dict]]) -> Scored:
        keys = list(dict.fromkeys(k for _, info in results for k in info))
        extra = {k: [info.get(k) for _, info in results] for k in keys}
        return Scored([s for s, _ in results], extra)

    def __call__(self, data, return_dict: bool = False):
        result = self.assemble(data, [self.score_part(data)])
        return result if return_dict else result["reward_tensor"]

    # -- the reward loop's protocol (verl.trainer.ppo.reward_loop.SampleScorer) ------------------------
    def score_part(self, data, first_row: int = 0) -> ScoredPart:
        """Decode and score the rows of ``data``, rows ``first_row, ...`` of a batch (the reward loop calls
        this from several threads; one pass calls it once with the whole batch)."""
        if self._rm_only(data):
            return ScoredPart([], Scored([]))
        with self._decode_lock:  # a fast tokenizer is not safe to share between threads
            rows = decode_rows(data, self.tokenizer, self.reward_fn_key, first_row)
        return ScoredPart(rows, self.score_rows(rows))

    def assemble(self, data, parts: list[ScoredPart]) -> dict:
        """The ``return_dict`` result for ``data`` from its parts (their rows are ``data``'s rows, in order):
        scores on each row's last model token, extra columns joined (None where a part lacks a column),
        count metrics added up, then the verdict shares and the agent loop's rewards over the whole batch."""
        scored: Scored | None = None
        if self._rm_only(data):
            # A model reward model already scored the batch (upstream behaviour: no rule scoring).
            reward = data.batch["rm_scores"].to(torch.float32).clone()
        else:
            rows = [row for part in parts for row in part.rows]
            if len(rows) != len(data):
                raise ValueError(f"{type(self).__name__}.assemble: the parts hold {len(rows)} rows for {len(data)}")
            scored = join_scored([part.scored for part in parts])
            responses = data.batch["responses"]
            reward = torch.zeros(responses.shape, dtype=torch.float32, device=responses.device)
            last = last_assistant_positions(data).tolist()
            for i, score in enumerate(scored.scores):
                reward[i, last[i]] = score
            if "rm_scores" in data.batch:
                reward = reward + data.batch["rm_scores"].to(reward)
            if "verdict" in scored.extra:
                scored.metrics.update(verdict_metrics(scored.extra["verdict"]))
            self._examine(rows, scored)
        metrics = add_agent_rewards(data, reward, self.agent_weights)
        return {
            "reward_tensor": reward,
            "reward_extra_info": scored.extra if scored is not None else {},
            "reward_metrics": {**(scored.metrics if scored is not None else {}), **metrics},
        }

    def _rm_only(self, data) -> bool:
        return "rm_scores" in data.batch and not self.combine_rm_scores

    def _examine(self, rows: list[Row], scored: Scored) -> None:
        shown: dict[str, int] = defaultdict(int)
        for row, score in zip(rows, scored.scores):
            if shown[row.data_source] >= self.num_examine:
                continue
            shown[row.data_source] += 1
            print(
                f"[prompt] {row.prompt}\n[response] {row.response}\n[ground_truth] {row.ground_truth}\n[score] {score}"
            )
