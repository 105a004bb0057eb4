"""verl-rewards' generative judge through verl-agent's OpenAI-compatible chat server: the judge's
HTTP client, the server's request handling and chat template, a model behind it, the reply parsed."""

import asyncio
import re
import threading

import pytest
from verl.agent.chat_server import ChatCompletionServer
from verl.agent.server import HFAsyncServer, ScriptedLLMServer
from verl.rewards.models.judge import GenerativeJudge, build_judge_scorer


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    from verl.workers.tiny import build_tiny_qwen2

    return build_tiny_qwen2(tmp_path_factory.mktemp("tiny_judge"), size="xs", seed=0).eval()


class Endpoint:
    """A ChatCompletionServer on its own event loop thread (the judge's client is blocking)."""

    def __init__(self, llm, tokenizer):
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        self.server = ChatCompletionServer(llm, tokenizer, default_max_tokens=32, model_name="judge-model")
        base = asyncio.run_coroutine_threadsafe(self.server.start("127.0.0.1", 0), self.loop).result(60)
        self.url = base if base.rstrip("/").endswith("/v1") else base.rstrip("/") + "/v1"

    def close(self):
        asyncio.run_coroutine_threadsafe(self.server.stop(), self.loop).result(60)
        self.loop.call_soon_threadsafe(self.loop.stop)


def grader(prompt_text: str) -> str:
    """A stand-in judge model: 9/10 when the candidate states the reference answer, else 1/10."""
    ref = re.search(r"Reference answer:\n(.*?)\n", prompt_text).group(1)
    cand = re.search(r"Candidate response:\n(.*?)\n\nRate", prompt_text, re.S).group(1)
    return "Score: 9" if ref in cand else "Score: 1"


def test_judge_scores_through_the_chat_endpoint(tokenizer, stop_ids):
    endpoint = Endpoint(ScriptedLLMServer(grader, stop_ids, tokenizer), tokenizer)
    try:
        judge = GenerativeJudge(backend="openai", url=endpoint.url, model="judge-model", max_score=10)
        right = judge("qa", "it is 42", "42", {"question": "6*7?"})
        wrong = judge("qa", "it is 41", "42", {"question": "6*7?"})
        assert right["judge_reply"] == "Score: 9" and right["score"] == pytest.approx(0.9) and right["judge_parsed"]
        assert wrong["score"] == pytest.approx(0.1)
        # Through the manager-level scorer: rule (none for this source) + weight * judge.
        scorer = build_judge_scorer({"enable": True, "backend": "openai", "url": endpoint.url, "model": "judge-model",
                                     "weight": 2.0})  # fmt: skip
        assert scorer("qa", "42", "42", {"question": "q"})["score"] == pytest.approx(1.8)
        # The server rendered the judge prompt with the tokenizer's chat template (one user turn).
        first = next(iter(endpoint.server.records.values()))[0]
        text = tokenizer.decode(first.prompt_ids)
        assert text.startswith("<|im_start|>user\nYou are grading an answer.") and text.endswith("<|im_start|>assistant\n")
    finally:
        endpoint.close()


@pytest.mark.slow
def test_judge_on_a_real_tiny_model_is_greedy_and_reproducible(tokenizer, stop_ids, tiny_model):
    """A real (random) model behind the endpoint: the judge asks for greedy decoding (temperature 0),
    so the same question gets the same reply; an unparseable reply scores 0, flagged."""
    endpoint = Endpoint(HFAsyncServer(tiny_model, stop_ids, tokenizer.pad_token_id), tokenizer)
    try:
        judge = GenerativeJudge(backend="openai", url=endpoint.url, model="judge-model", max_new_tokens=8)
        a = judge("qa", "it is 42", "42", {"question": "6*7?"})
        b = judge("qa", "it is 42", "42", {"question": "6*7?"})
        assert a["judge_reply"] == b["judge_reply"]
        assert 0.0 <= a["score"] <= 1.0 and (a["judge_parsed"] or a["score"] == 0.0)
        assert all(len(r.response_ids) <= 8 for recs in endpoint.server.records.values() for r in recs)
    finally:
        endpoint.close()


def test_device_and_dtype_belong_to_the_hf_backend():
    with pytest.raises(ValueError, match="device/dtype"):
        GenerativeJudge(backend="openai", url="http://127.0.0.1:1/v1", model="m", device="cuda")
