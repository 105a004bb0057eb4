"""Generative judge: an LLM reads a prompt template filled with the question, the response and the
reference answer, and its reply is parsed into a score.

Backends: ``openai`` (any OpenAI-compatible ``/chat/completions`` endpoint over HTTP: vLLM's
``vllm serve``, SGLang, TGI, a hosted API, or verl-agent's ``ChatCompletionServer`` over a local
model, which the tests use) or ``hf`` (a local causal LM through transformers, greedy decoding, on
``device`` in ``dtype``). The judge has the scorer signature, so it works as a manager's
``compute_score`` or inside one.

Config (``reward.reward_kwargs.judge``; also read from ``reward.reward_model.judge`` if the schema has it)::

    enable: false
    backend: openai            # openai | hf
    url: http://127.0.0.1:8000/v1
    model: judge-model-name    # openai: the served model; hf: a local path
    api_key_env: OPENAI_API_KEY  # name of the environment variable holding the key (optional)
    prompt_template: null      # str with {question} {response} {ground_truth}; default below
    max_score: 10              # the judge's scale; the score is reply / max_score, in [0, 1]
    max_new_tokens: 64
    timeout: 60                # openai: seconds per attempt
    max_retries: 2             # openai: retries of time-outs, connection errors, 429 and 5xx (with backoff)
    max_concurrency: 8         # openai: requests in flight from this judge
    device: null               # hf only: cpu | cuda | cuda:N (default cpu)
    dtype: null                # hf only: float32 | bfloat16 | float16 (default float32)
    weight: 1.0                # combined score = rule score + weight * judge score
    combine_with_rule: true    # add the rule score when the data source has a rule scorer
"""

from __future__ import annotations

import re
import threading
from typing import Any

from verl.rewards.models.chat_client import ChatClient

DEFAULT_TEMPLATE = (
    "You are grading an answer.\n"
    "Question:\n{question}\n\n"
    "Reference answer:\n{ground_truth}\n\n"
    "Candidate response:\n{response}\n\n"
    "Rate the candidate from 0 to {max_score}. Reply with 'Score: <number>' on the last line."
)

_SCORE = re.compile(r"Score\s*[:=]\s*(-?\d+(?:\.\d+)?)", re.IGNORECASE)
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def parse_judge_score(reply: str, max_score: float) -> float | None:
    """The last ``Score: x`` (else the last number) scaled to [0, 1]; None when the reply has none."""
    found = _SCORE.findall(reply) or _NUMBER.findall(reply)
    if not found:
        return None
    return min(max(float(found[-1]) / max_score, 0.0), 1.0)


class GenerativeJudge:
    """A scorer ``judge(data_source, solution_str, ground_truth, extra_info=None) -> dict``.

    The question comes from ``extra_info["question"]`` (or ``extra_info["prompt"]``) when present.
    Returns ``{"score", "judge_score", "judge_reply", "judge_parsed"}``; an unparseable reply scores 0
    with ``judge_parsed=False``.
    """

    def __init__(
        self,
        backend: str = "openai",
        url: str | None = None,
        model: str | None = None,
        api_key_env: str | None = None,
        prompt_template: str | None = None,
        max_score: float = 10.0,
        max_new_tokens: int = 64,
        timeout: float = 60.0,
        max_retries: int | None = None,
        max_concurrency: int | None = None,
        device: str | None = None,
        dtype: str | None = None,
    ):
        if backend not in ("openai", "hf"):
            raise ValueError(f"judge backend must be 'openai' or 'hf', got {backend!r}")
        if backend == "openai" and not url:
            raise ValueError("judge backend 'openai' needs url (e.g. http://127.0.0.1:8000/v1)")
        if not model:
            raise ValueError(f"judge backend {backend!r} needs model (the served name or a local path)")
        if backend == "hf" and (max_retries is not None or max_concurrency is not None):
            raise ValueError(
                "judge options max_retries/max_concurrency shape HTTP calls of the 'openai' backend; the 'hf' "
                "backend runs in process; remove them"
            )
        if backend == "openai" and (device is not None or dtype is not None):
            raise ValueError(
                "judge options device/dtype place a local (backend 'hf') model; the 'openai' backend's server "
                "decides its own; remove them"
            )
        self.device = device or "cpu"
        self.dtype = dtype or "float32"
        self.backend, self.url, self.model = backend, url, model
        self.api_key_env = api_key_env
        self.template = prompt_template or DEFAULT_TEMPLATE
        for field in ("{response}",):
            if field not in self.template:
                raise ValueError(f"judge prompt_template must contain {field}; got {self.template[:200]!r}")
        self.max_score = float(max_score)
        self.max_new_tokens = int(max_new_tokens)
        self.timeout = float(timeout)
        self._hf = None
        self._hf_lock = threading.Lock()
        self._client = None
        if backend == "openai":
            self._client = ChatClient(
                url,
                model,
                api_key_env=api_key_env,
                timeout=self.timeout,
                max_retries=2 if max_retries is None else max_retries,
                backoff=0.5,
                max_concurrency=8 if max_concurrency is None else max_concurrency,
            )

    def build_prompt(self, solution_str: str, ground_truth: Any, extra_info: dict | None) -> str:
        extra = extra_info or {}
        question = extra.get("question") or extra.get("prompt") or ""
        return self.template.format(
            question=question, response=solution_str, ground_truth=ground_truth, max_score=int(self.max_score)
        )

    def generate(self, prompt: str) -> str:
        return self._openai(prompt) if self.backend == "openai" else self._local(prompt)

    def _openai(self, prompt: str) -> str:
        return self._client.chat(
            [{"role": "user", "content": prompt}], max_tokens=self.max_new_tokens, temperature=0.0
        )

    def _local(self, prompt: str) -> str:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        with self._hf_lock:
            if self._hf is None:
                dtypes = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
                if self.dtype not in dtypes:
                    raise ValueError(f"judge dtype {self.dtype!r}; known: {sorted(dtypes)}")
                tok = AutoTokenizer.from_pretrained(self.model)
                lm = AutoModelForCausalLM.from_pretrained(self.model, dtype=dtypes[self.dtype])
                self._hf = (tok, lm.to(self.device).eval())
            tok, lm = self._hf
            if tok.chat_template:
                text = tok.apply_chat_template(
                    [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
                )
            else:
                text = prompt
            enc = tok(text, return_tensors="pt", add_special_tokens=False).to(self.device)
            with torch.no_grad():
                out = lm.generate(
                    **enc,
                    max_new_tokens=self.max_new_tokens,
                    do_sample=False,
                    pad_token_id=tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id,
                )
            return tok.decode(out[0, enc["input_ids"].shape[1] :], skip_special_tokens=True)

    def __call__(self, data_source, solution_str, ground_truth, extra_info=None, **kwargs) -> dict:
        reply = self.generate(self.build_prompt(solution_str, ground_truth, extra_info))
        score = parse_judge_score(reply, self.max_score)
        return {
            "score": score if score is not None else 0.0,
            "judge_score": score if score is not None else 0.0,
            "judge_reply": reply,
            "judge_parsed": score is not None,
        }


class RuleAndJudgeScorer:
    """``rule score + weight * judge score``. The rule part comes from ``rule`` (a user scorer) or,
    without one, from the built-in scorer of the row's data source when there is one (else 0)."""

    def __init__(
        self, judge: GenerativeJudge, rule=None, weight: float = 1.0, combine_with_rule: bool = True
    ):
        self.judge, self.rule = judge, rule
        self.weight, self.combine = float(weight), bool(combine_with_rule)

    def _rule_score(self, data_source, solution_str, ground_truth, extra_info, **kwargs) -> float:
        if not self.combine:
            return 0.0
        scorer = self.rule
        if scorer is None:
            from verl.rewards.scoring import get_scorer

            try:
                scorer = get_scorer(data_source)
            except ValueError:
                return 0.0  # a judge-only data source
        res = scorer(data_source, solution_str, ground_truth, extra_info, **kwargs)
        return float(res["score"]) if isinstance(res, dict) else float(res)

    def __call__(self, data_source, solution_str, ground_truth, extra_info=None, **kwargs) -> dict:
        j = self.judge(data_source, solution_str, ground_truth, extra_info)
        rule = self._rule_score(data_source, solution_str, ground_truth, extra_info, **kwargs)
        return dict(j, score=rule + self.weight * j["judge_score"], rule_score=rule)


def build_judge_scorer(judge_cfg: dict, rule=None):
    """The manager's compute_score for ``reward.reward_model.judge`` (see module docstring)."""
    cfg = dict(judge_cfg)
    cfg.pop("enable", None)
    weight = cfg.pop("weight", 1.0)
    combine = cfg.pop("combine_with_rule", True)
    return RuleAndJudgeScorer(GenerativeJudge(**cfg), rule=rule, weight=weight, combine_with_rule=combine)
