import string

import torch
from transformers import AutoModelForCausalLM, AutoModelForTokenClassification, AutoTokenizer
from verl.workers.tiny import CHARS, SPECIAL_TOKENS, build_char_tokenizer, build_tiny_qwen2


def test_tokenizer_round_trips_every_char_one_token_each(tiny_tokenizer):
    text = string.digits + string.ascii_letters + string.punctuation + " a  b\n\nc"
    ids = tiny_tokenizer(text, add_special_tokens=False)["input_ids"]
    assert len(ids) == len(text)
    assert tiny_tokenizer.decode(ids) == text
    # The in-memory tokenizer and the one AutoTokenizer loads agree id for id.
    assert build_char_tokenizer()(text, add_special_tokens=False)["input_ids"] == ids


def test_tokenizer_specials_and_chat_template(tiny_tokenizer):
    assert len(tiny_tokenizer) == len(SPECIAL_TOKENS) + len(CHARS)
    assert tiny_tokenizer.pad_token == "<|pad|>" and tiny_tokenizer.pad_token_id == 0
    assert tiny_tokenizer.eos_token == "<|endoftext|>" and tiny_tokenizer.eos_token_id == 1
    text = tiny_tokenizer.apply_chat_template(
        [{"role": "user", "content": "23+45="}], add_generation_prompt=True, tokenize=False
    )
    assert text == "<|im_start|>user\n23+45=<|im_end|>\n<|im_start|>assistant\n"
    ids = tiny_tokenizer(text, add_special_tokens=False)["input_ids"]
    im_start = tiny_tokenizer.convert_tokens_to_ids("<|im_start|>")
    assert ids[0] == im_start and ids.count(im_start) == 2
    assert len(ids) == len(text) - 2 * len("<|im_start|>") - len("<|im_end|>") + 3


def test_tiny_model_loads_with_same_outputs(tiny_model_dir):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    assert model.config.hidden_size == 64 and model.config.num_hidden_layers == 2
    assert model.config.tie_word_embeddings
    n = sum(p.numel() for p in model.parameters())
    assert 50_000 < n < 200_000
    rebuilt = build_tiny_qwen2(tiny_model_dir + "_again", size="xs", seed=0)
    x = torch.tensor([[2, 5, 6, 7, 3]])
    torch.testing.assert_close(model(x).logits, rebuilt(x).logits)
    assert AutoTokenizer.from_pretrained(tiny_model_dir).eos_token_id == 1


def test_value_model_has_scalar_head(tiny_value_model_dir):
    model = AutoModelForTokenClassification.from_pretrained(tiny_value_model_dir)
    out = model(torch.tensor([[2, 5, 6]])).logits
    assert out.shape == (1, 3, 1)


def test_tokenizer_padded_to_a_real_vocabulary_size(tmp_path):
    """Filler tokens fill the vocabulary up to vocab_size; text tokenizes as before; every id decodes."""
    import pytest

    build_char_tokenizer(tmp_path, vocab_size=600)
    tok = AutoTokenizer.from_pretrained(tmp_path)
    assert len(tok) == 600
    text = "a+b=12 xyz"
    assert tok(text, add_special_tokens=False)["input_ids"] == build_char_tokenizer()(text, add_special_tokens=False)["input_ids"]
    assert tok.decode([599]) == "<|unused_599|>"
    assert tok.decode([len(SPECIAL_TOKENS) + len(CHARS)]) == f"<|unused_{len(SPECIAL_TOKENS) + len(CHARS)}|>"
    with pytest.raises(ValueError, match="vocab_size=10 is below"):
        build_char_tokenizer(vocab_size=10)
