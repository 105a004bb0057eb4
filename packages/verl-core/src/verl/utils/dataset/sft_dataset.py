"""The SFT dataset: chat conversations (column ``messages``) -> token ids with a loss mask on assistant tokens.

Each row holds a list of chat messages ``{"role": "system" | "user" | "assistant" | "tool", "content": str}``,
single- or multi-turn, with at least one assistant message. The conversation is rendered with the
tokenizer's chat template **incrementally**: the ids of ``messages[:i+1]`` must extend the ids of
``messages[:i]`` (a template that rewrites earlier turns cannot be masked this way, and the error says
which row). For an assistant message the tokens after the generation prompt (``<|im_start|>assistant\\n``
for Qwen) up to the end of the message are trained on; everything else (system, user, tool turns and the
role headers) is context only. The prompt of a turn is thus tokenized exactly as the RL dataset tokenizes
it (``apply_chat_template(..., add_generation_prompt=True)``), so an SFT'd model sees the same prompts in RL.

The tokenizer is passed in (anything with ``apply_chat_template`` and ``__call__``), so core does not
depend on transformers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from verl.utils.dataset.rows import DatasetRowError, as_file_list, read_rows

__all__ = ["ROLES", "SFTDataset", "check_messages", "sft_collate_fn", "tokenize_conversation"]

ROLES = ("system", "user", "assistant", "tool")
TRUNCATION_MODES = ("error", "left", "right")


def check_messages(row: Any, where: str, messages_key: str = "messages") -> list[dict]:
    """The row's conversation as a list of ``{"role", "content"}`` dicts, or a `DatasetRowError` naming
    the file, row and field that is wrong."""
    if not isinstance(row, Mapping):
        raise DatasetRowError(f"{where}: a row must be a mapping of fields, got {type(row).__name__}")
    if messages_key not in row:
        raise DatasetRowError(
            f"{where}: field {messages_key!r} is missing; an SFT row needs a list of chat messages "
            f"[{{'role': 'user', 'content': ...}}, {{'role': 'assistant', 'content': ...}}] "
            f"(fields present: {sorted(row)}; set data.messages_key to use another column)"
        )
    messages = row[messages_key]
    if not isinstance(messages, list) or not messages:
        raise DatasetRowError(
            f"{where}: field {messages_key!r} must be a non-empty list of chat messages, got "
            f"{type(messages).__name__}: {messages!r:.80}"
        )
    out = []
    for i, m in enumerate(messages):
        field = f"{messages_key}[{i}]"
        if not isinstance(m, Mapping) or "role" not in m or "content" not in m:
            raise DatasetRowError(
                f"{where}: field {field!r} must be a message {{'role', 'content'}}, got {m!r:.80}"
            )
        if m["role"] not in ROLES:
            raise DatasetRowError(
                f"{where}: field {field}.role={m['role']!r} is not one of {', '.join(ROLES)}"
            )
        if not isinstance(m["content"], str):
            raise DatasetRowError(
                f"{where}: field {field}.content must be a string, got {type(m['content']).__name__}"
            )
        out.append({"role": m["role"], "content": m["content"]})
    if not any(m["role"] == "assistant" for m in out):
        raise DatasetRowError(
            f"{where}: field {messages_key!r} has no assistant message, so there is nothing to train on "
            f"(roles: {[m['role'] for m in out]})"
        )
    return out


def _encode(tokenizer: Any, messages: list[dict], generation_prompt: bool, chat_kwargs: dict) -> list[int]:
    text = tokenizer.apply_chat_template(
        messages, add_generation_prompt=generation_prompt, tokenize=False, **chat_kwargs
    )
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def tokenize_conversation(
    tokenizer: Any, messages: list[dict], where: str = "conversation", chat_kwargs: dict | None = None
) -> tuple[list[int], list[int]]:
    """``(input_ids, loss_mask)`` of a conversation; ``loss_mask[t] = 1`` on tokens of assistant replies.

    Raises `DatasetRowError` when the chat template is not prefix-stable for this conversation.
    """
    kwargs = dict(chat_kwargs or {})
    ids: list[int] = []
    mask: list[int] = []
    for i, message in enumerate(messages):
        full = _encode(tokenizer, messages[: i + 1], False, kwargs)
        start = len(ids)
        if message["role"] == "assistant":
            # The role header the model would be prompted with is context, not target.
            header = _encode(tokenizer, messages[:i], True, kwargs)
            if header[: len(ids)] != ids or full[: len(header)] != header:
                raise _not_prefix(where, i, "the generation prompt")
            start = len(header)
        if full[: len(ids)] != ids:
            raise _not_prefix(where, i, f"messages[:{i}]")
        mask.extend([0] * (start - len(ids)) + [int(message["role"] == "assistant")] * (len(full) - start))
        ids = full
    return ids, mask


def _not_prefix(where: str, i: int, what: str) -> DatasetRowError:
    return DatasetRowError(
        f"{where}: the chat template is not prefix-stable at message {i}: the tokens of {what} are not a "
        f"prefix of the tokens of messages[:{i + 1}], so assistant tokens cannot be located (the template "
        f"rewrites earlier turns, e.g. drops reasoning); use a template that renders turns independently"
    )


class SFTDataset(torch.utils.data.Dataset):
    """Conversations from parquet/jsonl/json files; items are ``input_ids``, ``attention_mask``,
    ``position_ids`` and ``loss_mask`` (1-D, unpadded; `sft_collate_fn` right-pads a batch).

    ``config`` is the ``data`` section (DictConfig or dict): ``messages_key`` (default ``messages``),
    ``max_length``, ``truncation`` (error | left | right), ``apply_chat_template_kwargs``.
    Every row is checked and tokenized up front, so a bad row fails before training starts.
    """

    def __init__(self, data_files: Any, tokenizer: Any, config: Any = None, max_samples: int = -1):
        def get(key: str, default: Any) -> Any:
            value = config.get(key, default) if config is not None else default
            return default if value is None else value

        self.messages_key = get("messages_key", "messages")
        self.max_length = int(get("max_length", 1024))
        self.truncation = get("truncation", "error")
        chat_kwargs = dict(get("apply_chat_template_kwargs", {}))
        if self.truncation not in TRUNCATION_MODES:
            raise ValueError(
                f"data.truncation={self.truncation!r} is not one of {', '.join(TRUNCATION_MODES)}"
            )
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        if pad is None:
            raise ValueError("the tokenizer has neither a pad_token_id nor an eos_token_id to pad with")
        self.pad_token_id = int(pad)
        self.data_files = as_file_list(data_files)
        self.items: list[tuple[list[int], list[int]]] = []
        for f in self.data_files:
            for label, row in read_rows(f):
                if max_samples is not None and 0 < max_samples <= len(self.items):
                    break
                where = f"{f}: {label}"
                messages = check_messages(row, where, self.messages_key)
                ids, mask = tokenize_conversation(tokenizer, messages, where, chat_kwargs)
                self.items.append(self._truncate(ids, mask, where))
        if not self.items:
            raise ValueError(f"no conversations in {self.data_files}")

    def _truncate(self, ids: list[int], mask: list[int], where: str) -> tuple[list[int], list[int]]:
        limit = self.max_length
        if len(ids) > limit:
            if self.truncation == "error":
                raise DatasetRowError(
                    f"{where}: the conversation is {len(ids)} tokens, longer than data.max_length={limit}; "
                    f"raise data.max_length or set data.truncation=left|right"
                )
            ids, mask = (
                (ids[-limit:], mask[-limit:]) if self.truncation == "left" else (ids[:limit], mask[:limit])
            )
        if sum(mask) == 0:
            raise DatasetRowError(
                f"{where}: no assistant token is left after truncating to data.max_length={limit} "
                f"(truncation={self.truncation!r}); raise data.max_length"
            )
        return ids, mask

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        ids, mask = self.items[index]
        n = len(ids)
        return {
            "input_ids": torch.tensor(ids, dtype=torch.long),
            "attention_mask": torch.ones(n, dtype=torch.long),
            "position_ids": torch.arange(n, dtype=torch.long),
            "loss_mask": torch.tensor(mask, dtype=torch.long),
        }


def sft_collate_fn(items: list[dict[str, torch.Tensor]], pad_token_id: int = 0) -> dict[str, torch.Tensor]:
    """Right-pad a list of items to the longest: ``input_ids`` with ``pad_token_id``, masks with 0,
    ``position_ids`` continuing past the end (padding is masked out of attention and loss)."""
    length = max(len(it["input_ids"]) for it in items)
    out = {
        "input_ids": torch.full((len(items), length), pad_token_id, dtype=torch.long),
        "attention_mask": torch.zeros(len(items), length, dtype=torch.long),
        "loss_mask": torch.zeros(len(items), length, dtype=torch.long),
        "position_ids": torch.arange(length, dtype=torch.long).repeat(len(items), 1),
    }
    for i, it in enumerate(items):
        n = len(it["input_ids"])
        for key in ("input_ids", "attention_mask", "loss_mask"):
            out[key][i, :n] = it[key]
    return out
