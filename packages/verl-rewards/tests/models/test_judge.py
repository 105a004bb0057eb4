"""The generative judge against a stub OpenAI-compatible server on 127.0.0.1, and a local tiny LM."""

import pytest
from aiohttp import web
from verl.rewards.http_server import HTTPLimits, read_json
from verl.rewards.models.judge import GenerativeJudge, build_judge_scorer, parse_judge_score

from .chat_stub import chat_endpoint


class _Chat:
    seen: list = []

    @classmethod
    async def handle(cls, request: web.Request) -> web.Response:
        body = await read_json(request, HTTPLimits())
        cls.seen.append((request.path, dict(request.headers), body))
        prompt = body["messages"][-1]["content"]
        # The stub "judge" gives 8/10 when the response mentions the reference answer, else 2/10.
        ref = prompt.split("Reference answer:\n")[1].split("\n")[0]
        cand = prompt.split("Candidate response:\n")[1].split("\n\nRate")[0]
        reply = "Looks right.\nScore: 8" if ref in cand else "Wrong.\nScore: 2"
        return web.json_response({"choices": [{"message": {"role": "assistant", "content": reply}}]})


@pytest.fixture(scope="module")
def endpoint():
    with chat_endpoint(_Chat.handle) as url:
        yield url


def test_openai_endpoint_request_and_score(endpoint, monkeypatch):
    monkeypatch.setenv("JUDGE_KEY_FOR_TEST", "k-123")
    judge = GenerativeJudge(backend="openai", url=endpoint, model="judge-x", api_key_env="JUDGE_KEY_FOR_TEST")
    _Chat.seen.clear()
    out = judge("anything", "the answer is 42", "42", {"question": "6*7?"})
    assert out == {
        "score": 0.8,
        "judge_score": 0.8,
        "judge_reply": "Looks right.\nScore: 8",
        "judge_parsed": True,
    }
    path, headers, body = _Chat.seen[0]
    assert path == "/v1/chat/completions"
    assert headers["Authorization"] == "Bearer k-123"
    assert body["model"] == "judge-x" and body["temperature"] == 0.0
    assert "6*7?" in body["messages"][0]["content"]
    assert judge("anything", "it is 41", "42")["score"] == pytest.approx(0.2)


def test_judge_combined_with_rule_score(endpoint):
    scorer = build_judge_scorer(
        {"enable": True, "backend": "openai", "url": endpoint, "model": "m", "weight": 0.5}
    )
    out = scorer("arithmetic", "42", "42")  # rule 1.0 + 0.5 * 0.8
    assert out["score"] == pytest.approx(1.4) and out["rule_score"] == 1.0
    out = scorer("free/text", "nope", "42")  # no rule scorer for this source: judge only
    assert out["score"] == pytest.approx(0.1) and out["rule_score"] == 0.0


def test_parse_and_config_errors():
    assert parse_judge_score("I'd say Score: 7.5", 10) == 0.75
    assert parse_judge_score("3 then 12", 10) == 1.0  # clipped to the scale
    assert parse_judge_score("no digits", 10) is None
    with pytest.raises(ValueError, match="needs url"):
        GenerativeJudge(backend="openai", model="m")
    with pytest.raises(ValueError, match="'openai' or 'hf'"):
        GenerativeJudge(backend="grpc", model="m")


def test_endpoint_error_is_reported():
    # A closed port: the transport error is retried (max_retries), then reported with the endpoint.
    judge = GenerativeJudge(backend="openai", url="http://127.0.0.1:9/v1", model="m", max_retries=1)
    with pytest.raises(Exception, match=r"127\.0\.0\.1:9/v1/chat/completions.*2 attempt"):
        judge("s", "r", "g")
    assert judge._client.stats["attempts"] == 2


def test_local_hf_backend_matches_a_direct_greedy_decode(tmp_path):
    tiny = pytest.importorskip("verl.workers.tiny")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tiny.build_tiny_qwen2(tmp_path, size="xs", seed=1)
    judge = GenerativeJudge(backend="hf", model=str(tmp_path), max_new_tokens=6)
    out = judge("s", "5", "5", {"question": "2+3?"})
    tok = AutoTokenizer.from_pretrained(tmp_path)
    lm = AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    prompt = judge.build_prompt("5", "5", {"question": "2+3?"})
    text = tok.apply_chat_template(
        [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
    )
    ids = tok(text, return_tensors="pt", add_special_tokens=False)
    with torch.no_grad():
        gen = lm.generate(**ids, max_new_tokens=6, do_sample=False, pad_token_id=tok.pad_token_id)
    assert out["judge_reply"] == tok.decode(gen[0, ids["input_ids"].shape[1] :], skip_special_tokens=True)
    assert out["judge_parsed"] == (parse_judge_score(out["judge_reply"], 10) is not None)
