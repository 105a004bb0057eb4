"""Upstream's judged metrics end to end against a real model: a tiny Qwen2 (Transformers, random init, then
taught the judge's three JSON answers) served by verl-agent's OpenAI-compatible chat server over its HF
decode loop, asked through verl-rewards' chat client with greedy decoding.

The model knows one answer per prompt kind, so what it extracts differs from the conversation's last
message: the metrics' values show whether the judge's extraction was used.
"""

import asyncio
import threading

import pytest
from verl.rewards.models.chat_client import ChatClient
from verl.rewards.scoring import default_compute_score
from verl_recipe_collabllm.interaction import format_chat
from verl_recipe_collabllm.metrics import (
    ACCURACY_PROMPT,
    EXTRACT_PROMPTS,
    METRICS,
    Conversation,
    MetricContext,
    MetricOptions,
    bleu,
)

pytestmark = pytest.mark.slow

REQUEST = {"role": "user", "content": "Write add(a, b)."}
SINGLE_TURN = "Write a Python function add(a, b) that returns the sum."
DOC = "the cat sat on the mat"
CODE = "def add(a, b):\n    return a + b"
# the answers the model is taught, in the forms upstream's judge prompts ask for
ANSWERS = {
    "accuracy": '{"thought": "it matches", "accuracy": 1}',
    "document": '{"thought": "merged", "final_completion": "' + DOC + '"}',
    "code": '{"thought": "merged", "final_completion": """' + CODE + '"""}',
}


def conversation(last: str, ground_truth: str, extra_info: dict) -> Conversation:
    messages = [REQUEST, {"role": "assistant", "content": "Which language?"}, {"role": "user", "content": "Python."},
                {"role": "assistant", "content": last}]  # fmt: skip
    return Conversation(messages, 1, "collabllm", ground_truth, extra_info)


def judge_prompts(conv: Conversation) -> dict[str, str]:
    chat = format_chat(conv.messages)
    return {
        "accuracy": ACCURACY_PROMPT.format(single_turn_prompt=SINGLE_TURN, ground_truth=conv.ground_truth, chat_history=chat),
        "document": EXTRACT_PROMPTS["document"].format(chat_history=chat),
        "code": EXTRACT_PROMPTS["code"].format(chat_history=chat),
    }


def teach(model, tok, pairs: list[tuple[str, str]], steps: int = 300) -> float:
    """Masked next-token loss on the answers (the prompts as the chat server renders one user message);
    returns the last step's loss."""
    import torch

    torch.manual_seed(0)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a 2-layer model gains nothing from more; on a shared CPU they spin
    rows = []
    for prompt, answer in pairs:
        head = tok.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=False)
        p = tok(head, add_special_tokens=False)["input_ids"]
        a = tok(answer + "<|im_end|>", add_special_tokens=False)["input_ids"]
        rows.append((torch.tensor([p + a]), len(p)))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    loss = torch.tensor(float("nan"))
    for step in range(steps):
        ids, n_prompt = rows[step % len(rows)]
        logits = model(input_ids=ids).logits[0, n_prompt - 1 : -1]
        loss = torch.nn.functional.cross_entropy(logits, ids[0, n_prompt:])
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    torch.set_num_threads(threads)
    return float(loss.detach())


@pytest.fixture(scope="module")
def judge_url(tmp_path_factory):
    from verl.agent.chat_server import ChatCompletionServer
    from verl.agent.server import HFAsyncServer
    from verl.workers.tiny import build_char_tokenizer, build_tiny_qwen2

    tok = build_char_tokenizer()
    model = build_tiny_qwen2(tmp_path_factory.mktemp("judge"), size="xs", seed=0)
    doc = conversation("the dog sat", DOC, {})
    code = conversation("def add(a, b):\n    return a * b", "", {})
    pairs = [(judge_prompts(doc)["accuracy"], ANSWERS["accuracy"]), (judge_prompts(doc)["document"], ANSWERS["document"]),
             (judge_prompts(code)["code"], ANSWERS["code"])]  # fmt: skip
    assert teach(model, tok, pairs) < 0.05
    stop = [tok.convert_tokens_to_ids("<|im_end|>"), tok.eos_token_id]
    server = ChatCompletionServer(HFAsyncServer(model, stop, tok.pad_token_id), tok, model_name="tiny-judge")
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    url = asyncio.run_coroutine_threadsafe(server.start("127.0.0.1", 0), loop).result(60)
    yield url

    async def shutdown():
        await server.stop()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]  # the decode loop
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    asyncio.run_coroutine_threadsafe(shutdown(), loop).result(60)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(60)
    loop.close()


def ctx(url: str, options: MetricOptions | None = None) -> MetricContext:
    judge = ChatClient.from_kwargs({"model": "tiny-judge", "api_base": url, "temperature": 0, "max_tokens": 80})
    return MetricContext(default_compute_score, judge=judge, options=options or MetricOptions())


def score(name: str, conv: Conversation, context: MetricContext) -> float:
    return asyncio.run(METRICS.get(name).fn(conv, context))


def test_accuracy_is_the_judges_verdict_against_the_ground_truth(judge_url):
    conv = conversation("the dog sat", DOC, {"interaction_kwargs": {"single_turn_prompt": SINGLE_TURN}})
    context = ctx(judge_url)
    assert score("accuracy", conv, context) == 1.0  # the model says 1; the rule scorer would not
    assert context.judge.stats["calls"] == 1
    with pytest.raises(ValueError, match="extra_info.interaction_kwargs.single_turn_prompt"):
        score("accuracy", conversation("the dog sat", DOC, {}), context)


def test_bleu_is_on_the_judges_extraction(judge_url):
    conv = conversation("the dog sat", DOC, {})
    extracted = score("bleu_score", conv, ctx(judge_url))
    assert extracted == pytest.approx(1.0)  # the model extracted the reference itself
    last = score("bleu_score", conv, ctx(judge_url, MetricOptions(completion_extraction="last_message")))
    assert last == pytest.approx(bleu("the dog sat", DOC, unit="char")) and last < 0.5


def test_pass_rate_runs_the_judges_extraction(judge_url):
    meta = {"single_turn_metadata": {"test": "def check(candidate):\n    assert candidate(2, 3) == 5\n", "entry_point": "add"}}
    conv = conversation("def add(a, b):\n    return a * b", "", meta)  # the last message is wrong code
    assert score("pass_rate", conv, ctx(judge_url)) == 1.0  # the model's extraction is right
    assert score("pass_rate", conv, ctx(judge_url, MetricOptions(completion_extraction="last_message"))) == 0.0
