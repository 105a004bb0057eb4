"""collabllm_agent: one trained turn, then num_repeat_rollouts futures with the (rule-based, over HTTP)
simulated user, within the turn limits; the batch the manager makes of it feeds the MR manager."""

import asyncio
import re

import numpy as np
import pytest
from verl.agent.manager import AgentLoopManager
from verl.agent.server import ScriptedLLMServer
from verl.protocol import DataProto
from verl_recipe_collabllm import task
from verl_recipe_collabllm.agent_loop import CollabLLMAgentLoop
from verl_recipe_collabllm.interaction import CollabLLMInteraction
from verl_recipe_collabllm.reward_manager import CollabLLMRewardManager


@pytest.fixture(scope="module")
def stop_ids(char_tok):
    return [char_tok.convert_tokens_to_ids("<|im_end|>"), char_tok.eos_token_id]


def rollout_config(**overrides):
    from verl_recipe_collabllm.config import load_collabllm_config

    argv = [
        "data.max_prompt_length=48",
        "data.max_response_length=16",
        "actor_rollout_ref.rollout.multi_turn.max_user_turns=2",
        "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=3",
        "actor_rollout_ref.rollout.multi_turn.num_repeat_rollouts=3",
        "actor_rollout_ref.rollout.agent.default_agent_loop=collabllm_agent",
    ]
    argv += [f"actor_rollout_ref.rollout.{k.replace('__', '.')}={v}" for k, v in overrides.items()]
    return load_collabllm_config(argv).actor_rollout_ref.rollout


class RecordingServer(ScriptedLLMServer):
    """The scripted policy, recording every call's sampling settings."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.params = []

    async def generate(self, prompt_ids, sampling_params, request_id):
        self.params.append(dict(sampling_params))
        return await super().generate(prompt_ids, sampling_params, request_id)


def policy(ask: bool, add_right: bool = True):
    """Asks first (or guesses 7); told the number, answers the sum (or the sum plus one)."""

    def reply(prompt_text: str) -> str:
        told = re.findall(r"It is (\d+)\.", prompt_text)
        if not told:
            return task.ASK if ask else "7"
        offset = int(re.search(r"Add (\d+) to", prompt_text).group(1))
        return str(offset + int(told[-1]) + (0 if add_right else 1))

    return reply


def run_row(char_tok, stop_ids, server, rule_user, **cfg):
    interactions = {
        "collabllm": CollabLLMInteraction(
            {"name": "collabllm", "user_model": "rule", "api_base": rule_user.base_url}
        )
    }
    loop = CollabLLMAgentLoop(rollout_config(**cfg), server, char_tok, interactions=interactions)
    row = next(
        r
        for r in task.make_rows("train")
        if r["extra_info"]["interaction_kwargs"]["single_turn_prompt"] == task.complete_request(3, 7)
    )
    assert (
        row["prompt"][0]["content"] == "Add 3 to my number." and row["reward_model"]["ground_truth"] == "10"
    )
    return asyncio.run(
        loop.run({"do_sample": True, "seed": 11}, raw_prompt=row["prompt"], extra_info=row["extra_info"])
    )


def test_asking_then_answering(char_tok, stop_ids, rule_user):
    server = RecordingServer(policy(ask=True), stop_ids, char_tok)
    out = run_row(char_tok, stop_ids, server, rule_user)
    # the trajectory is the prompt and the trained turn only, all of it the model's
    assert char_tok.decode(out.response_ids) == "Which number?<|im_end|>" and out.response_mask == [1] * 14
    convs = out.extra_fields["messages"]["messages"]
    assert len(convs) == 3
    for conv in convs:  # asked, told 7, answered 10; the user then ended the chat
        assert [m["content"] for m in conv] == ["Add 3 to my number.", "Which number?", "It is 7.", "10"]
    assert out.metrics == {
        "future_rollouts": 3.0, "future_user_turns": 1.0, "future_assistant_turns": 1.0,
        "user_terminated": 1.0, "user_parse_failures": 0.0, "first_turn_cut": 0.0,
    }  # fmt: skip
    # 1 trained call + 3 futures x 1 call; every call has a seed of its own
    seeds = [p["seed"] for p in server.params]
    assert len(seeds) == 4 and len(set(seeds)) == 4


def test_turn_limits_end_a_future_that_keeps_asking(char_tok, stop_ids, rule_user):
    server = ScriptedLLMServer(lambda text: task.ASK, stop_ids, char_tok)
    out = run_row(char_tok, stop_ids, server, rule_user, multi_turn__num_repeat_rollouts=2)
    convs = out.extra_fields["messages"]["messages"]
    # max_user_turns 2, max_assistant_turns 3: trained turn, user, assistant, user, assistant
    assert [[m["role"] for m in c] for c in convs] == [
        ["user"] + ["assistant", "user"] * 2 + ["assistant"]
    ] * 2
    assert out.metrics["future_user_turns"] == 2.0 and out.metrics["user_terminated"] == 0.0
    out = run_row(char_tok, stop_ids, server, rule_user, multi_turn__max_assistant_turns=2)
    assert [m["role"] for m in out.extra_fields["messages"]["messages"][0]] == [
        "user",
        "assistant",
        "user",
        "assistant",
    ]


def test_a_guess_ends_at_once_and_a_cut_turn_is_not_continued(char_tok, stop_ids, rule_user):
    out = run_row(char_tok, stop_ids, ScriptedLLMServer(policy(ask=False), stop_ids, char_tok), rule_user)
    convs = out.extra_fields["messages"]["messages"]
    assert [[m["content"] for m in c] for c in convs] == [["Add 3 to my number.", "7"]] * 3
    long = ScriptedLLMServer(lambda text: "I will now think about it at length", stop_ids, char_tok)
    before = rule_user.requests_served
    out = run_row(char_tok, stop_ids, long, rule_user)
    assert out.extra_fields["stop_reason"] == "response_length" and len(out.response_ids) == 16
    assert out.extra_fields["messages"]["messages"] == [
        [
            {"role": "user", "content": "Add 3 to my number."},
            {"role": "assistant", "content": "I will now think"},
        ]
    ]
    assert out.metrics["future_rollouts"] == 0.0 and out.metrics["first_turn_cut"] == 1.0
    assert rule_user.requests_served == before  # the user never saw the unfinished message


def test_batch_through_the_manager_and_the_mr(char_tok, stop_ids, rule_user):
    """Rows of the task through AgentLoopManager (the worker's path) and the MR manager: asking and adding
    right earns 1 - 0.01 * 6 words; guessing 7 earns 0 - 0.01 (or 1 - 0.01 when 7 is right)."""
    rows = task.make_rows("train")[:6]
    ntb = {
        k: np.array([r[k] for r in rows], dtype=object)
        for k in ("data_source", "reward_model", "extra_info", "agent_name")
    }
    ntb["raw_prompt"] = np.array([r["prompt"] for r in rows], dtype=object)
    interactions = {
        "collabllm": CollabLLMInteraction(
            {"name": "collabllm", "user_model": "rule", "api_base": rule_user.base_url}
        )
    }
    manager = CollabLLMRewardManager(
        char_tok, 0, metric_weights={"accuracy": 1.0, "token_amount": -0.01},
        accuracy_scorer="rule", completion_extraction="last_message",
    )  # fmt: skip
    for ask, expected in (
        (True, [1 - 0.06] * 6),
        (False, [(r["reward_model"]["ground_truth"] == "7") - 0.01 for r in rows]),
    ):
        server = ScriptedLLMServer(policy(ask=ask), stop_ids, char_tok)
        agents = AgentLoopManager(
            rollout_config(), server, char_tok, loop_kwargs={"interactions": interactions}, seed=3
        )
        out = agents.generate_sequences(
            DataProto.from_dict(non_tensors=dict(ntb), meta_info={"do_sample": True})
        )
        out.non_tensor_batch.update(ntb)
        result = manager(out, return_dict=True)
        assert result["reward_extra_info"]["score"] == pytest.approx(expected)
        assert result["reward_extra_info"]["first_turn_question"] == [float(ask)] * 6
        assert out.meta_info["metrics"]["agent/future_rollouts"] == [3.0] * 6


def test_missing_settings_are_errors(char_tok, stop_ids):
    server = ScriptedLLMServer([task.ASK], stop_ids, char_tok)
    with pytest.raises(ValueError, match="num_repeat_rollouts=None .* must be >= 1.*verl-collabllm"):
        CollabLLMAgentLoop(
            rollout_config(multi_turn__num_repeat_rollouts="null"), server, char_tok, interactions={}
        )
    with pytest.raises(ValueError, match="max_assistant_turns=1 must be >= 2"):
        CollabLLMAgentLoop(
            rollout_config(multi_turn__max_assistant_turns=1), server, char_tok, interactions={}
        )
    with pytest.raises(ValueError, match="interaction_config_path"):
        CollabLLMAgentLoop(rollout_config(), server, char_tok)
    loop = CollabLLMAgentLoop(rollout_config(), server, char_tok, interactions={})
    row = task.make_rows("train")[0]
    with pytest.raises(KeyError, match="interaction 'collabllm'.*configured: \\[\\]"):
        asyncio.run(loop.run({}, raw_prompt=row["prompt"], extra_info=row["extra_info"]))
