"""The simulated user: its prompt, its JSON replies, retries on bad ones, and the built-in task's rule-based
user reached over HTTP through the same client."""

import asyncio

import pytest
import requests
from verl_recipe_collabllm import task
from verl_recipe_collabllm.interaction import TERMINATION_SIGNAL, CollabLLMInteraction, parse_json_object
from verl_recipe_collabllm.sim_server import rule_user_reply

KWARGS = {"name": "collabllm", "single_turn_prompt": task.complete_request(3, 5), "task_desc": task.TASK_DESC}


def user(url: str, **config) -> CollabLLMInteraction:
    return CollabLLMInteraction(
        {"name": "collabllm", "user_model": "sim", "api_base": url, "backoff": 0.01, **config}
    )


def answer(interaction, *turns):
    messages = [{"role": "user", "content": task.request(3)}]
    messages += [{"role": r, "content": t} for r, t in zip(["assistant", "user"] * len(turns), turns)]

    async def go():
        iid = await interaction.start_interaction("i0", **KWARGS)
        try:
            return await interaction.generate_response(iid, messages, **KWARGS)
        finally:
            await interaction.finalize_interaction(iid)

    return asyncio.run(go())


def test_rule_based_user_over_http(rule_user):
    interaction = user(rule_user.base_url)
    before = rule_user.requests_served
    assert answer(interaction, "Which number?")[:2] == (False, "It is 5.")
    assert answer(interaction, "Which number?", "It is 5.", "Your number, please?")[:2] == (False, "It is 5.")
    done, reply, score, _ = answer(interaction, "8")
    assert (done, reply, score) == (True, TERMINATION_SIGNAL, 0.0)  # an answer, right or wrong, ends it
    assert answer(interaction, "Which number?", "It is 5.", "9")[:2] == (True, TERMINATION_SIGNAL)
    assert rule_user.requests_served - before == 4 and interaction.client.stats["retries"] == 0


def test_the_prompt_holds_the_hidden_request_and_the_chat(scripted_server):
    url, set_replies = scripted_server
    log = set_replies('{"current_answer": "none", "thought": "t", "response": "It is 5."}')
    interaction = user(url, termination_signal="<<BYE>>")
    assert answer(interaction, "Which number?")[:2] == (False, "It is 5.")
    prompt = log.prompts[0]
    assert task.complete_request(3, 5) in prompt and task.TASK_DESC in prompt
    assert "**User**: Add 3 to my number.\n**Assistant**: Which number?" in prompt
    assert "<<BYE>>" in prompt and TERMINATION_SIGNAL not in prompt
    # the rule-based user reads the same prompt
    assert parse_json_object(rule_user_reply(prompt))["response"] == "It is 5."


def test_unparseable_replies_are_retried_then_end_the_conversation(scripted_server):
    url, set_replies = scripted_server
    log = set_replies(
        "Sure! It is 5.", '{"thought": "no response key"}', '```json\n{"response": "It is 5."}\n```'
    )
    assert answer(user(url, num_retries=3, enable_log=True), "Which number?")[:2] == (False, "It is 5.")
    assert len(log.prompts) == 3
    log = set_replies("never JSON")
    done, reply, _, extra = answer(user(url, num_retries=2), "Which number?")
    assert (done, reply, extra["parse_failed"]) == (True, "", True) and "no JSON object" in extra["error"]
    assert len(log.prompts) == 2
    log = set_replies(f'{{"response": "thanks {TERMINATION_SIGNAL}"}}')
    assert answer(user(url), "8")[0] is True  # the signal anywhere in the message ends the chat


def test_config_and_row_errors(rule_user):
    with pytest.raises(ValueError, match="user_model .* is required"):
        CollabLLMInteraction({"name": "collabllm", "api_base": rule_user.base_url})
    with pytest.raises(ValueError, match="unknown keys \\['user_modle'\\]"):
        CollabLLMInteraction(
            {"name": "collabllm", "user_model": "m", "user_modle": "m", "api_base": rule_user.base_url}
        )
    with pytest.raises(ValueError, match="api_base is required"):
        CollabLLMInteraction({"name": "collabllm", "user_model": "gpt-4o-mini"})
    interaction = user(rule_user.base_url)
    with pytest.raises(ValueError, match="needs interaction_kwargs.single_turn_prompt"):
        asyncio.run(interaction.start_interaction("i1", name="collabllm"))


def test_rule_server_refuses_what_it_cannot_read(rule_user):
    r = requests.post(
        rule_user.base_url + "/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]}
    )
    assert r.status_code == 400 and "collabllm simulator prompt" in r.json()["error"]["message"]
    assert requests.get(rule_user.base_url + "/models").json()["data"][0]["id"] == "collabllm-rule-user"
    with pytest.raises(ValueError, match="does not say 'My number is"):
        task.simulate_user("Add 3 to my number.", "Which number?")
