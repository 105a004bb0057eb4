"""A real Hugging Face tokenizer built locally: one token per character, so expected ids are easy to derive."""

import string

import pytest

CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'][0] | upper }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}A: {% endif %}"
)
CHARS = string.printable  # letters, digits, punctuation, whitespace
SPECIAL = ["<pad>", "<eos>", "<unk>"]


def render(messages, add_generation_prompt=True) -> str:
    """The chat template above, written out by hand (independent of jinja)."""
    text = "".join(f"{m['role'][0].upper()}: {m['content']}\n" for m in messages)
    return text + ("A: " if add_generation_prompt else "")


@pytest.fixture(scope="session")
def char_tokenizer(tmp_path_factory):
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(SPECIAL + sorted(set(CHARS)))}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="<pad>",
        eos_token="<eos>",
        unk_token="<unk>",
        chat_template=CHAT_TEMPLATE,
    )
    path = tmp_path_factory.mktemp("char_tokenizer")
    fast.save_pretrained(path)
    loaded = AutoTokenizer.from_pretrained(path)
    loaded.vocab_map = vocab  # for tests: char -> id
    return loaded


@pytest.fixture(scope="session")
def render_chat():
    """The hand-written rendering of CHAT_TEMPLATE (tests import fixtures, not conftest)."""
    return render
