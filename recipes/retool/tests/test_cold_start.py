"""Cold-start traces: made by the tool loop with the real sandbox, masked like RL rollouts; the SFT loss falls."""

import pytest
from verl_recipe_retool import cold_start, task


@pytest.fixture(scope="module")
def rows():
    return task.make_rows(3, seed=0, digits=2)


def test_tool_traces_are_the_chat_template_rendering_with_tool_turns_masked(rows, tok, rollout_config):
    traces = cold_start.make_traces(
        rows, rollout_config(multi_turn__max_assistant_turns=3), tok, use_tool=True
    )
    for row, t in zip(rows, traces):
        a, b = row["extra_info"]["a"], row["extra_info"]["b"]
        product = str(a * b)
        call = task.tool_turns(row)[0]
        conversation = [
            *row["prompt"],
            {"role": "assistant", "content": call},
            {"role": "tool", "content": product},
            {"role": "assistant", "content": f"\\boxed{{{product}}}"},
        ]
        # independent reference: the chat template's rendering of the whole conversation
        rendered = tok.apply_chat_template(conversation, tokenize=False)
        assert tok.decode(t["ids"]) == rendered.removesuffix("\n")
        trained = tok.decode([i for i, m in zip(t["ids"], t["mask"]) if m])
        assert trained == f"{call}<|im_end|>\\boxed{{{product}}}<|im_end|>"  # model turns only: no tool output


def test_direct_traces_answer_at_once(rows, tok, rollout_config):
    traces = cold_start.make_traces(rows, rollout_config(), tok, use_tool=False)
    for row, t in zip(rows, traces):
        trained = tok.decode([i for i, m in zip(t["ids"], t["mask"]) if m])
        assert trained == f"\\boxed{{{row['reward_model']['ground_truth']}}}<|im_end|>"


def test_sft_lowers_the_loss_on_the_traces(rows, tok, rollout_config, tmp_path):
    import torch
    from verl.workers.tiny import build_tiny_qwen2

    traces = cold_start.make_traces(
        rows, rollout_config(multi_turn__max_assistant_turns=3), tok, use_tool=True
    )
    model = build_tiny_qwen2(tmp_path, size="xs", seed=0)
    first = cold_start.sft(model, traces, steps=1, lr=0.0)  # lr 0: the loss of the untrained model
    last = cold_start.sft(model, traces, steps=40)
    assert torch.isfinite(torch.tensor(last)) and last < 0.6 * first


def test_a_trace_that_does_not_fit_is_an_error_naming_the_length(rows, tok):
    from verl.trainer.config import load_config

    # the call alone is ~75 tokens: with 96 the tool turn does not fit
    cfg = load_config(
        ["data.max_response_length=96", "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=3"]
    ).actor_rollout_ref.rollout
    with pytest.raises(
        RuntimeError, match="stopped with 'response_length'.*max_response_length is too short"
    ):
        cold_start.make_traces(rows[:1], cfg, tok, use_tool=True)
