"""Token bookkeeping for multi-turn trajectories: the ids a loop appends equal the chat template's.

A trajectory is ``prompt_ids`` (the rendered prompt, with the generation prompt) followed by
``response_ids``: model turns (mask 1) interleaved with environment turns (tool results, user
replies; mask 0). The environment part of each step is rendered by the chat template itself:

- ``end_of_turn``: what the template writes after an assistant message's content (Qwen:
  ``<|im_end|>\\n``). The model's own stop token covers its first part; the rest (``\\n``) is
  glue the loop appends, masked out.
- ``render_messages(msgs)``: the text the template adds for ``msgs`` after a finished assistant
  turn, including the next generation prompt (found by rendering a fixed two-message conversation
  with and without ``msgs`` and taking the difference).

`check_trajectory` (the sanity mode) renders the whole conversation with the template and compares
it with the trajectory's ids, reporting the first difference in words.
"""

from __future__ import annotations

from typing import Any

_SENTINEL = "\x00VERL_AGENT_SENTINEL\x00"
_BASE = [{"role": "user", "content": "U"}, {"role": "assistant", "content": "A"}]


class TokenizationMismatch(AssertionError):
    """The trajectory's token ids are not what the chat template gives for the conversation."""


class ChatTokens:
    """Chat-template rendering helpers bound to one tokenizer."""

    def __init__(self, tokenizer: Any):
        self.tokenizer = tokenizer
        text = self.render([{"role": "user", "content": "U"}, {"role": "assistant", "content": _SENTINEL}])
        if _SENTINEL not in text:
            raise ValueError("the tokenizer's chat template does not render assistant message content")
        self.end_of_turn = text.split(_SENTINEL, 1)[1]

    def render(
        self, messages: list[dict], tools: list[dict] | None = None, add_generation_prompt: bool = False
    ) -> str:
        return self.tokenizer.apply_chat_template(
            messages, tools=tools or None, add_generation_prompt=add_generation_prompt, tokenize=False
        )

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=False)

    def prompt_ids(self, messages: list[dict], tools: list[dict] | None = None) -> list[int]:
        """The prompt with the assistant generation prompt appended."""
        return self.encode(self.render(messages, tools, add_generation_prompt=True))

    def glue_after(self, model_ids: list[int]) -> str:
        """The end-of-turn text the template still expects after a model turn that ended with
        ``model_ids`` (e.g. ``\\n`` after ``<|im_end|>``; all of it after a length cut)."""
        tail = self.decode(model_ids[-1:]) if model_ids else ""
        if tail and self.end_of_turn.startswith(tail):
            return self.end_of_turn[len(tail) :]
        return self.end_of_turn

    def render_messages(self, messages: list[dict]) -> str:
        """Template text for ``messages`` appended after an assistant turn, plus the generation prompt."""
        base = self.render(_BASE)
        full = self.render(_BASE + list(messages), add_generation_prompt=True)
        if not full.startswith(base):
            raise ValueError(
                "the chat template renders earlier messages differently once more are added; cannot "
                f"append {[m.get('role') for m in messages]} turns incrementally"
            )
        return full[len(base) :]

    def assistant_content(self, model_ids: list[int], stop_token_ids: list[int]) -> str:
        """The assistant message text of a model turn: its tokens without the final stop token."""
        if model_ids and model_ids[-1] in stop_token_ids:
            model_ids = model_ids[:-1]
        return self.decode(model_ids)


def describe_difference(tokenizer: Any, got: list[int], want: list[int], context: int = 12) -> str:
    """Where two id lists first differ, with the decoded text around that point."""
    i = next((k for k, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
    lo = max(0, i - context)

    def show(ids: list[int]) -> str:
        return repr(tokenizer.decode(ids[lo : i + context], skip_special_tokens=False))

    return (
        f"first difference at token {i} (trajectory has {len(got)} tokens, template {len(want)}): "
        f"trajectory ids {got[lo : i + context]} = {show(got)}; template ids {want[lo : i + context]} = {show(want)}"
    )


def check_trajectory(
    chat: ChatTokens,
    messages: list[dict],
    tools: list[dict] | None,
    trajectory_ids: list[int],
    stop_token_ids: list[int],
    mode: str = "strict",
) -> str | None:
    """Compare ``trajectory_ids`` with the template rendering of ``messages`` (ending with an
    assistant turn). The trajectory must equal the rendering up to the end of the last assistant
    content, and the rendering's remainder must be exactly the template's end-of-turn text.

    ``mode``: ``strict`` raises `TokenizationMismatch` on any difference; ``ignore_strippable``
    accepts differences in whitespace only; ``warn`` returns the difference (the loop records it in
    its metrics); ``disable`` skips. Returns ``None`` when they agree.
    """
    if mode == "disable":
        return None
    if mode not in ("strict", "ignore_strippable", "warn"):
        raise ValueError(
            f"tokenization_sanity_check_mode {mode!r}; known: strict, ignore_strippable, warn, disable"
        )
    want = chat.encode(chat.render(messages, tools))
    got = list(trajectory_ids)
    if got and got[-1] in stop_token_ids:
        got = got[:-1]
    problem = None
    if want[: len(got)] != got:
        problem = describe_difference(chat.tokenizer, got, want)
    elif chat.decode(want[len(got) :]) != chat.end_of_turn:
        problem = (
            f"the template continues with {chat.decode(want[len(got) :])!r} after the trajectory, "
            f"expected only the end of turn {chat.end_of_turn!r}"
        )
    if problem is None:
        return None
    if mode == "ignore_strippable" and "".join(chat.decode(got).split()) == "".join(
        chat.decode(want).removesuffix(chat.end_of_turn).split()
    ):
        return None
    if mode == "warn":
        return problem
    raise TokenizationMismatch(problem)
