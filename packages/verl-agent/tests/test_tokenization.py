import asyncio

from verl.agent.agent_loop import SingleTurnAgentLoop
from verl.agent.server import ScriptedLLMServer
from verl.agent.tokenization import ChatTokens


def test_chat_tokens_template_pieces(tokenizer):
    chat = ChatTokens(tokenizer)
    assert chat.end_of_turn == "<|im_end|>\n"
    assert chat.render_messages([{"role": "tool", "content": "7"}]) == (
        "<|im_start|>tool\n7<|im_end|>\n<|im_start|>assistant\n"
    )
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    x = tokenizer.encode("x", add_special_tokens=False)
    assert chat.glue_after(x + [im_end]) == "\n"  # the model wrote <|im_end|> itself
    assert chat.glue_after(x) == "<|im_end|>\n"  # cut by length: the whole end of turn is glue


def test_single_turn_agent(tokenizer, stop_ids, rollout_config):
    server = ScriptedLLMServer(["#### 5"], stop_ids, tokenizer)
    loop = SingleTurnAgentLoop(rollout_config(response_length=4), server, tokenizer)
    out = asyncio.run(loop.run({}, raw_prompt=[{"role": "user", "content": "2+3="}]))
    assert tokenizer.decode(out.response_ids) == "####"  # cut at response_length=4
    assert out.response_mask == [1, 1, 1, 1] and out.metrics["response_length_exceeded"] == 1.0


def test_end_of_turn_token_of_the_worker(tokenizer):
    from verl.agent.worker import end_of_turn_token_ids

    assert end_of_turn_token_ids(tokenizer) == [tokenizer.convert_tokens_to_ids("<|im_end|>")]


def test_calculator_computes_only_what_the_model_writes():
    from verl.agent.examples.tool_arithmetic import CalculatorTool, evaluate

    assert evaluate("(2+3)*4-6//4") == 19 and evaluate(" 23+45= ") == 68
    tool = CalculatorTool()

    async def go():
        iid, _ = await tool.create(expression="23+45=")  # create kwargs are not an answer key
        return [
            await tool.execute(iid, {}),
            await tool.execute(iid, {"expression": "2*21"}),
            await tool.execute(iid, {"expression": "__import__('os')"}),
            await tool.execute(iid, {"expression": "9**9**9"}),
        ]

    empty, given, bad, power = (r[0].text for r in asyncio.run(go()))
    assert empty == "Error: give an 'expression' string"
    assert given == "42" and bad.startswith("Error: unsupported expression") and power.startswith("Error")
    assert tool.tool_schema.function.parameters.required == ["expression"]
