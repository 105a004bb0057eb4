"""Tiny models built from a config and a locally built character tokenizer.

There is no model hub on CPU test machines, so tests and the default CPU main job build their model
here: a random-init Qwen2 with a character-level tokenizer, saved with ``save_pretrained`` so the
real ``from_pretrained(path)`` code paths load them.

    tok = build_char_tokenizer(d)          # saves tokenizer files into d
    build_tiny_qwen2(d, size="xs")         # saves model (and tokenizer, if missing) into d
"""

from __future__ import annotations

import os
import string
from pathlib import Path

PAD_TOKEN = "<|pad|>"
EOS_TOKEN = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
UNK_TOKEN = "<|unk|>"
SPECIAL_TOKENS = [PAD_TOKEN, EOS_TOKEN, IM_START, IM_END, UNK_TOKEN]

# Qwen-style chat template: every message is <|im_start|>role\ncontent<|im_end|>\n.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

# Characters the tokenizer knows, one token each (others are dropped, as byte-level BPE without
# those bytes in its vocabulary does).
CHARS = string.digits + string.ascii_letters + string.punctuation + " \n"

# Qwen2's pre-tokenizer split (a fact about the Qwen2 tokenizer, needed for identical behaviour).
_QWEN2_PRETOKENIZE_REGEX = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)


def _byte_level(ch: str) -> str:
    """GPT-2 byte-level alphabet for one ASCII char: printable bytes map to themselves, others to 256+b."""
    b = ord(ch)
    return ch if 33 <= b <= 126 else chr(256 + b)

SIZES: dict[str, dict[str, int]] = {
    # for unit tests that build models in memory (tiny_config)
    "xxxs": dict(hidden_size=16, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                 intermediate_size=32),
    "xxs": dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                intermediate_size=64),
    "xs": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
               intermediate_size=128),
    # head_dim 32 (xs has 16): the smallest head size vLLM-CPU's attention kernels accept
    "xs32": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                 intermediate_size=128),
    "s": dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
              intermediate_size=512),
}


def tiny_config(vocab_size: int, size: str = "xxs", **overrides) -> dict:
    """Keyword arguments of a tiny decoder config (``Qwen2Config(**tiny_config(48))``, ``LlamaConfig``, ...):
    the shapes of ``SIZES[size]``, ``vocab_size`` and ``overrides``."""
    if size not in SIZES:
        raise ValueError(f"unknown tiny model size {size!r}; known: {sorted(SIZES)}")
    return {"vocab_size": vocab_size, **SIZES[size], **overrides}


def build_char_tokenizer(out_dir: str | os.PathLike | None = None, vocab_size: int | None = None):
    """Build a character-level ``PreTrainedTokenizerFast`` (pad/eos set, Qwen-style chat template).

    Saves it with ``save_pretrained(out_dir)`` when ``out_dir`` is given; returns the tokenizer.
    Special tokens take ids 0..4 (pad=0, eos=1, im_start=2, im_end=3, unk=4); characters follow.
    ``vocab_size``: pad the vocabulary with filler tokens ``<|unused_N|>`` up to this size, so that a
    random-init model of a real model's vocabulary (Qwen2.5's 151936 rows) samples only ids this
    tokenizer decodes. Text still tokenizes one character a token (no merges reach the fillers).
    """
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    # transformers maps model_type "qwen2" to Qwen2Tokenizer whatever tokenizer_config.json says, and
    # that class rebuilds a byte-level BPE pipeline from our vocab. So the vocab is written in
    # byte-level form (space -> "\u0120", newline -> "\u010a") with no merges, and the pipeline below
    # is the same one Qwen2Tokenizer builds: both classes then tokenize identically, one char a token.
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}
    for ch in CHARS:
        vocab[_byte_level(ch)] = len(vocab)
    if vocab_size is not None:
        if vocab_size < len(vocab):
            raise ValueError(f"vocab_size={vocab_size} is below the {len(vocab)} special and character tokens")
        vocab.update({f"<|unused_{i}|>": i for i in range(len(vocab), vocab_size)})
    core = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=None, continuing_subword_prefix="",
                                end_of_word_suffix="", fuse_unk=False, byte_fallback=False))
    core.decoder = decoders.ByteLevel()
    core.normalizer = normalizers.NFC()
    core.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(_QWEN2_PRETOKENIZE_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    core.add_special_tokens(SPECIAL_TOKENS)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token=PAD_TOKEN,
        eos_token=EOS_TOKEN,
        unk_token=UNK_TOKEN,
        additional_special_tokens=[IM_START, IM_END],
        padding_side="left",
        model_max_length=4096,
    )
    tok.chat_template = CHAT_TEMPLATE
    if out_dir is not None:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        tok.save_pretrained(str(out_dir))
    return tok


def load_char_tokenizer(out_dir: str | os.PathLike):
    """`build_char_tokenizer` saved to ``out_dir`` and loaded back through ``AutoTokenizer.from_pretrained``
    (the path a model's tokenizer takes)."""
    from transformers import AutoTokenizer

    build_char_tokenizer(out_dir)
    return AutoTokenizer.from_pretrained(str(out_dir))


def tiny_qwen2_config(size: str = "xs", vocab_size: int | None = None, tied: bool = True):
    """The ``Qwen2Config`` for a tiny size (see :data:`SIZES`) over the character vocabulary;
    ``tied``: the LM head shares the embedding matrix."""
    from transformers import Qwen2Config

    n_vocab = vocab_size if vocab_size is not None else len(SPECIAL_TOKENS) + len(CHARS)
    return Qwen2Config(**tiny_config(
        n_vocab, size, max_position_embeddings=1024, tie_word_embeddings=tied, pad_token_id=0, eos_token_id=1,
        bos_token_id=None, rms_norm_eps=1e-6, rope_theta=10000.0, attention_dropout=0.0,
    ))  # fmt: skip


def build_tiny_qwen2(
    out_dir: str | os.PathLike, size: str = "xs", seed: int = 0, value_head: bool = False, tied: bool = True
):
    """Random-init a tiny ``Qwen2ForCausalLM`` and save it (plus the char tokenizer) to ``out_dir``.

    With ``value_head=True`` the saved model is a ``Qwen2ForTokenClassification`` with one label (a
    critic / reward model: backbone + scalar head). Returns the in-memory model (float32).
    """
    import torch
    from transformers import Qwen2ForCausalLM, Qwen2ForTokenClassification

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tok = build_char_tokenizer(out)
    config = tiny_qwen2_config(size, vocab_size=len(tok), tied=tied)
    torch.manual_seed(seed)
    if value_head:
        config.num_labels = 1
        config.classifier_dropout = 0.0
        model = Qwen2ForTokenClassification(config)
    else:
        model = Qwen2ForCausalLM(config)
        model.generation_config.pad_token_id = tok.pad_token_id
        model.generation_config.eos_token_id = tok.eos_token_id
    model.save_pretrained(str(out))
    return model


# ------------------------------------------------------------------------------------------- warm start
def answer_examples(tokenizer, rows: list[dict]) -> list[tuple[list[int], list[int]]]:
    """``(prompt ids, answer ids + EOS)`` per RL row: the prompt rendered with the chat template as the RL
    dataset renders it, the answer its ``reward_model.ground_truth``."""
    examples = []
    for row in rows:
        prompt = tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=False)
        p_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        a_ids = tokenizer(row["reward_model"]["ground_truth"], add_special_tokens=False)["input_ids"]
        examples.append((p_ids, [*a_ids, tokenizer.eos_token_id]))
    return examples


def fine_tune_on_answers(model, examples: list[tuple[list[int], list[int]]], steps: int, batch_size: int,
                         lr: float, pad_token_id: int, seed: int = 0, weight_decay: float = 0.01,
                         warmup_steps: int = 0) -> float:  # fmt: skip
    """A CPU default's warm start, in process: AdamW on the answer tokens only (the prompt is context), on
    ``batch_size`` examples drawn with ``random.Random(seed)`` each step, the LR ramped up linearly over
    ``warmup_steps``. Leaves the model in eval mode; returns the last step's loss."""
    import random

    import torch

    torch.manual_seed(seed)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warmup_steps)) if warmup_steps else None
    gen = random.Random(seed)
    loss = torch.tensor(float("nan"))
    for _ in range(steps):
        batch = gen.sample(examples, k=min(batch_size, len(examples)))
        width = max(len(p) + len(a) for p, a in batch)
        ids = torch.full((len(batch), width), pad_token_id)
        labels = torch.full((len(batch), width), -100)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for i, (p, a) in enumerate(batch):
            ids[i, : len(p) + len(a)] = torch.tensor(p + a)
            labels[i, len(p) : len(p) + len(a)] = torch.tensor(a)
            mask[i, : len(p) + len(a)] = 1
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        if sched is not None:
            sched.step()
    model.eval()
    return float(loss.detach())


def pad_masked_rows(rows: list[tuple[list[int], list[int]]]):
    """``(ids, attention_mask, loss_mask)`` [N, longest] of ``(token ids, loss mask)`` rows, right-padded
    with 0 (the loss mask may be shorter than its row)."""
    import torch

    ids = torch.zeros((len(rows), max(len(i) for i, _ in rows)), dtype=torch.long)
    mask = torch.zeros_like(ids)
    attn = torch.zeros_like(ids)
    for r, (i, m) in enumerate(rows):
        ids[r, : len(i)] = torch.tensor(i)
        mask[r, : len(m)] = torch.tensor(m)
        attn[r, : len(i)] = 1
    return ids, attn, mask


def masked_next_token_loss(model, ids, attention_mask, loss_mask):
    """Mean next-token cross-entropy over the tokens whose ``loss_mask`` is 1 (a multi-turn warm start
    trains the model's own turns, not the user's or the tools')."""
    import torch

    logits = model(input_ids=ids, attention_mask=attention_mask).logits[:, :-1].float()
    nll = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1), reduction="none")
    m = loss_mask[:, 1:].reshape(-1).float()
    return (nll * m).sum() / m.sum()
