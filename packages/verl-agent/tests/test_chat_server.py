"""The OpenAI-compatible endpoint, called through a real HTTP client (urllib) on 127.0.0.1."""

import asyncio
import json
import re
import urllib.error
import urllib.request

from verl.agent.chat_server import ChatCompletionServer
from verl.agent.server import ScriptedLLMServer
from verl.agent.tools import format_tool_call

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two integers.",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                "required": ["a", "b"],
            },
        },
    }
]


def post(url: str, body: dict, headers: dict | None = None) -> tuple[int, dict]:
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json", **(headers or {})}
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def model(text: str) -> str:
    found = re.findall(r"<\|im_start\|>tool\n(\d+)<\|im_end\|>", text)
    return (
        f"The sum is {found[-1]}."
        if found
        else "Let me compute. " + format_tool_call("add", {"a": 2, "b": 3})
    )


async def agent_session(base: str) -> tuple[list[dict], list[tuple[int, dict]]]:
    """A client-side agent loop as another framework would write it (OpenAI message format)."""
    messages = [{"role": "user", "content": "2+3?"}]
    errors = [
        await asyncio.to_thread(post, base + "/chat/completions", {"messages": []}),
        await asyncio.to_thread(post, base + "/nope", {}),
    ]
    for _ in range(3):
        status, resp = await asyncio.to_thread(
            post,
            base + "/chat/completions",
            {"model": "verl-policy", "messages": messages, "tools": TOOLS, "max_tokens": 200},
            {"X-Session-Id": "s1"},
        )
        assert status == 200, resp
        choice = resp["choices"][0]
        messages.append(choice["message"])
        if choice["finish_reason"] != "tool_calls":
            break
        for call in choice["message"]["tool_calls"]:
            args = json.loads(call["function"]["arguments"])
            # Send the arguments back re-serialized differently: the server must still recognise them.
            call["function"]["arguments"] = json.dumps(args, separators=(",", ":"))
            messages.append(
                {"role": "tool", "tool_call_id": call["id"], "content": str(args["a"] + args["b"])}
            )
    return messages, errors


def test_chat_endpoint_with_tools_records_a_trajectory(tokenizer, stop_ids):
    server = ChatCompletionServer(ScriptedLLMServer(model, stop_ids, tokenizer), tokenizer)

    async def main():
        base = await server.start("127.0.0.1", 0)
        try:
            return await agent_session(base)
        finally:
            await server.stop()

    messages, errors = asyncio.run(main())
    assert errors[0][0] == 400 and "'messages'" in errors[0][1]["error"]["message"]
    assert errors[1][0] == 404
    assert messages[1]["content"] == "Let me compute."
    assert messages[1]["tool_calls"][0]["function"]["name"] == "add"
    assert messages[2]["content"] == "5" and messages[3] == {"role": "assistant", "content": "The sum is 5."}

    traj = server.trajectory("s1")
    call_text = "Let me compute. " + format_tool_call("add", {"a": 2, "b": 3})
    env_text = "\n<|im_start|>tool\n5<|im_end|>\n<|im_start|>assistant\n"
    env_len = len(env_text.replace("<|im_start|>", "\x01").replace("<|im_end|>", "\x01"))
    assert tokenizer.decode(traj.response_ids, skip_special_tokens=False) == (
        call_text + "<|im_end|>" + env_text + "The sum is 5.<|im_end|>"
    )
    assert traj.response_mask == [1] * (len(call_text) + 1) + [0] * env_len + [1] * (len("The sum is 5.") + 1)
    assert traj.response_logprobs[0] == -0.5 and traj.num_turns == 4
    assert traj.prompt_ids == tokenizer.encode(
        "<|im_start|>user\n2+3?<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False
    )


def test_chat_endpoint_on_the_tiny_policy(tokenizer, stop_ids, tmp_path):
    from verl.agent.server import HFAsyncServer
    from verl.workers.tiny import build_tiny_qwen2

    tiny = build_tiny_qwen2(tmp_path, size="xs").eval()
    server = ChatCompletionServer(HFAsyncServer(tiny, stop_ids, tokenizer.pad_token_id), tokenizer)

    async def main():
        base = await server.start()
        try:
            return await asyncio.to_thread(
                post,
                base + "/chat/completions",
                {
                    "messages": [{"role": "user", "content": "hi"}],
                    "max_tokens": 7,
                    "temperature": 0,
                    "user": "u",
                },
            )
        finally:
            await server.stop()

    status, resp = asyncio.run(main())
    assert status == 200
    rec = server.records["u"][0]
    assert resp["usage"]["completion_tokens"] == len(rec.response_ids) == len(rec.log_probs) <= 7
    assert resp["usage"]["prompt_tokens"] == len(rec.prompt_ids)
    assert resp["choices"][0]["finish_reason"] in ("stop", "length")


def sync_agent(base_url: str, session_id: str, raw_prompt, **row) -> float:
    """A blocking agent of another framework: chat until no tool call, run tools itself."""
    messages = [dict(m) for m in raw_prompt]
    for _ in range(3):
        status, resp = post(
            base_url + "/chat/completions", {"messages": messages, "tools": TOOLS, "session_id": session_id}
        )
        assert status == 200, resp
        msg = resp["choices"][0]["message"]
        messages.append(msg)
        if not msg.get("tool_calls"):
            return 1.0 if msg["content"] == "The sum is 5." else 0.0
        for call in msg["tool_calls"]:
            args = json.loads(call["function"]["arguments"])
            messages.append(
                {"role": "tool", "tool_call_id": call["id"], "content": str(args["a"] + args["b"])}
            )
    return 0.0


def test_chat_endpoint_agent_loop_through_the_manager(tokenizer, stop_ids, rollout_config):
    import numpy as np
    from verl import DataProto
    from verl.agent.manager import AgentLoopManager

    cfg = rollout_config(
        response_length=200, agent__default_agent_loop="chat_endpoint_agent", agent__num_workers=3
    )
    server = ScriptedLLMServer(model, stop_ids, tokenizer)
    manager = AgentLoopManager(cfg, server, tokenizer, loop_kwargs={"agent_fn": sync_agent})
    prompts = DataProto.from_dict(
        non_tensors={"raw_prompt": np.array([[{"role": "user", "content": "2+3?"}]] * 3, dtype=object)}
    )
    for _ in range(2):  # a second rollout (new event loop) starts a new endpoint
        out = manager.generate_sequences(prompts)
        assert out.non_tensor_batch["reward_score"].tolist() == [1.0, 1.0, 1.0]
        n_model = (
            len("Let me compute. " + format_tool_call("add", {"a": 2, "b": 3})) + 1 + len("The sum is 5.") + 1
        )
        assert out.batch["response_mask"].sum(-1).tolist() == [n_model] * 3
        assert out.non_tensor_batch["num_turns"].tolist() == [4] * 3
