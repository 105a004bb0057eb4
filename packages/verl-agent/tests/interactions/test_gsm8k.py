"""The interaction loop: the GSM8K tutor says wrong, the model retries, then it says right."""

import asyncio

from verl.agent.interactions import Gsm8kInteraction
from verl.agent.interactions.gsm8k import CORRECT, INCORRECT, extract_answer
from verl.agent.server import ScriptedLLMServer
from verl.agent.tool_agent import ToolAgentLoop

PROMPT = [{"role": "user", "content": "Tom has 2 apples and buys 3. How many?"}]


def test_extract_answer():
    assert extract_answer("so #### 1,250 apples") == "1250"
    assert extract_answer("maybe 3 or 4") == "4"
    assert extract_answer("none") is None


def test_tutor_lets_the_model_retry(tokenizer, stop_ids, rollout_config):
    server = ScriptedLLMServer(["#### 4", "Sorry. #### 5"], stop_ids, tokenizer)
    loop = ToolAgentLoop(
        rollout_config(response_length=500), server, tokenizer, interactions={"gsm8k": Gsm8kInteraction()}
    )
    out = asyncio.run(
        loop.run(
            {}, raw_prompt=PROMPT, extra_info={"interaction_kwargs": {"name": "gsm8k", "ground_truth": "5"}}
        )
    )
    msgs = out.extra_fields["messages"]
    assert [m["role"] for m in msgs] == ["user", "assistant", "user", "assistant"]
    assert msgs[2]["content"] == INCORRECT
    assert out.reward_score == 1.0 and out.extra_fields["turn_scores"] == [0.0, 1.0]
    assert out.extra_fields["stop_reason"] == "interaction_done" and out.num_turns == 4
    env_text = f"\n<|im_start|>user\n{INCORRECT}<|im_end|>\n<|im_start|>assistant\n"
    env_len = len(env_text.replace("<|im_start|>", "\x01").replace("<|im_end|>", "\x01"))
    assert out.response_mask == [1] * (len("#### 4") + 1) + [0] * env_len + [1] * (len("Sorry. #### 5") + 1)


def test_tutor_turn_limit_and_score(tokenizer, stop_ids, rollout_config):
    server = ScriptedLLMServer(["#### 7"], stop_ids, tokenizer)  # always wrong
    cfg = rollout_config(response_length=2000, multi_turn__max_user_turns=2)
    loop = ToolAgentLoop(cfg, server, tokenizer, interactions={"gsm8k": Gsm8kInteraction()})
    out = asyncio.run(
        loop.run({}, raw_prompt=PROMPT, interaction_kwargs={"name": "gsm8k", "ground_truth": 5})
    )
    assert len(server.prompts) == 3 and out.reward_score == 0.0
    assert out.extra_fields["stop_reason"] == "max_user_turns"
    assert [m["content"] for m in out.extra_fields["messages"] if m["role"] == "user"][1:] == [
        INCORRECT,
        INCORRECT,
    ]
    assert CORRECT not in str(out.extra_fields["messages"])
