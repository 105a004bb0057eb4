"""A generative reward model scoring as samples arrive: verl-rewards' judge (``reward.reward_kwargs.judge``)
asks an OpenAI-compatible endpoint served by a process of its own (a Ray actor: verl-agent's chat server
over a grader model that answers "Score: 9" when the candidate contains the reference answer, else
"Score: 1"), on the rollouter's scoring thread. Every trained row's judge score is checked by hand from its
own decoded response; the combined score is the rule score plus the judge's."""

import asyncio
import re
import threading

import pytest

from .runs import scoring_recorder

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def grader(prompt_text: str) -> str:
    ref = re.search(r"Reference answer:\n(.*?)\n", prompt_text).group(1)
    cand = re.search(r"Candidate response:\n(.*?)\n\nRate", prompt_text, re.S).group(1)
    return "Score: 9" if ref.strip() and ref.strip() in cand else "Score: 1"


class JudgeEndpoint:
    """verl-agent's ChatCompletionServer over the grader, on an event loop thread of this actor."""

    def __init__(self, tokenizer_dir: str):
        from transformers import AutoTokenizer
        from verl.agent.chat_server import ChatCompletionServer
        from verl.agent.server import ScriptedLLMServer

        tok = AutoTokenizer.from_pretrained(tokenizer_dir)
        stops = [tok.convert_tokens_to_ids("<|im_end|>"), tok.eos_token_id]
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        self.server = ChatCompletionServer(ScriptedLLMServer(grader, stops, tok), tok, model_name="judge")
        base = asyncio.run_coroutine_threadsafe(self.server.start("127.0.0.1", 0), self.loop).result(60)
        self.base = base if base.rstrip("/").endswith("/v1") else base.rstrip("/") + "/v1"

    def url(self) -> str:
        return self.base

    def requests(self) -> int:
        return sum(len(v) for v in self.server.records.values())


def test_a_generative_judge_scores_samples_as_they_arrive(ray_cluster, tmp_path, assets):
    import ray
    from transformers import AutoTokenizer
    from verl.trainer.main_ppo import run_ppo
    from verl_recipe_fully_async.main import RECIPE

    policy = next(a.split("=", 1)[1] for a in assets if a.startswith("actor_rollout_ref.model.path="))
    endpoint = ray.remote(num_cpus=0.1)(JudgeEndpoint).remote(policy)
    url = ray.get(endpoint.url.remote())
    trained, calls = [], []
    cfg = RECIPE.load_config(
        [
            *assets,
            "+reward.reward_kwargs.judge.enable=true",
            "+reward.reward_kwargs.judge.backend=openai",
            f"+reward.reward_kwargs.judge.url={url}",
            "+reward.reward_kwargs.judge.model=judge",
            "+reward.reward_kwargs.judge.max_concurrency=16",
            "trainer.total_training_steps=2",
            "trainer.test_freq=-1",
            "trainer.val_before_train=false",
            f"trainer.default_local_dir={tmp_path / 'run'}",
        ]
    )
    run_ppo(cfg, **{**RECIPE.trainer_kwargs(cfg), "trainer_cls": scoring_recorder(trained, calls)})
    assert len(trained) == 32 and len(calls) > 1 and sum(calls) >= 32
    tok = AutoTokenizer.from_pretrained(policy)
    for s in trained:
        b, ntb = s.data.batch, s.data.non_tensor_batch
        for i in range(len(s.data)):
            n = int(b["response_mask"][i].sum())
            response = tok.decode(b["responses"][i][:n], skip_special_tokens=True)
            truth = ntb["reward_model"][i]["ground_truth"]
            want = 0.9 if truth in response else 0.1
            assert ntb["judge_score"][i] == pytest.approx(want), (response, truth)
            total = float(b["token_level_scores"][i].sum())
            assert total == pytest.approx(float(ntb["rule_score"][i]) + want, abs=1e-6)
    assert ray.get(endpoint.requests.remote()) >= 32 * 8  # one judge call per trajectory
