"""A tiny Qwen2-VL built from a config, with a locally built processor (no hub).

The language model is the character-level tiny Qwen2 of :mod:`verl.workers.tiny`; the vision tower is
a two-block ViT with Qwen2-VL's 14-pixel patches and 2x2 patch merger. The processor is the slow
(PIL) ``Qwen2VLImageProcessorPil`` (the fast one needs torchvision, which this torch cannot take)
plus the char tokenizer extended with Qwen2-VL's vision special tokens and a chat template that
renders ``{"type": "image"}`` content parts as ``<|vision_start|><|image_pad|><|vision_end|>``.

    build_tiny_qwen2_vl(d)                      # saves model + processor into d
    AutoProcessor.from_pretrained(d)            # Qwen2VLProcessor
    AutoModelForImageTextToText.from_pretrained(d)
    image_rows()                                # dataset rows with images for it (PIL, the vlm extra)
"""

from __future__ import annotations

import os
from pathlib import Path

from verl.workers.tiny import IM_END, IM_START, SIZES, build_char_tokenizer

VISION_START = "<|vision_start|>"
VISION_END = "<|vision_end|>"
IMAGE_PAD = "<|image_pad|>"
VIDEO_PAD = "<|video_pad|>"
VISION_TOKENS = [VISION_START, VISION_END, IMAGE_PAD, VIDEO_PAD]

# Qwen2-VL's template, reduced to what the tiny model needs: string content, or a list of parts
# ({"type": "image"} / {"type": "video"} / {"type": "text", "text": ...}).
VL_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' or 'image' in part %}{{ '<|vision_start|><|image_pad|><|vision_end|>' }}"
    "{% elif part['type'] == 'video' or 'video' in part %}{{ '<|vision_start|><|video_pad|><|vision_end|>' }}"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}"
    "{{ '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

# Small images keep CPU runs fast: 28x28 .. 112x112 pixels -> 1 .. 16 merged vision tokens.
MIN_PIXELS = 28 * 28
MAX_PIXELS = 112 * 112

VISION_SIZES: dict[str, dict[str, int]] = {
    "xs": dict(depth=2, embed_dim=32, num_heads=2, mlp_ratio=2),
    "s": dict(depth=4, embed_dim=64, num_heads=4, mlp_ratio=2),
}


def build_vl_tokenizer(out_dir: str | os.PathLike | None = None):
    """The char tokenizer of :mod:`verl.workers.tiny` plus Qwen2-VL's vision special tokens."""
    tok = build_char_tokenizer(None)
    tok.add_special_tokens({"additional_special_tokens": [IM_START, IM_END, *VISION_TOKENS]})
    tok.chat_template = VL_CHAT_TEMPLATE
    if out_dir is not None:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        tok.save_pretrained(str(out_dir))
    return tok


def _image_only_processor_class():
    """``Qwen2VLProcessor`` without its video processor, registered with ``AutoProcessor``.

    transformers 5 cannot construct ``Qwen2VLProcessor`` without torchvision (its video-processor slot
    is type-checked against a class only exported when torchvision is installed), and PyPI's torchvision
    does not match this torch. Images need no video processor: this subclass drops the slot, and the
    registration lets ``AutoProcessor.from_pretrained(path)`` load the saved processor by name.
    """
    global _IMAGE_ONLY_CLS
    if _IMAGE_ONLY_CLS is not None:
        return _IMAGE_ONLY_CLS
    from transformers import AutoProcessor, Qwen2VLConfig, Qwen2VLProcessor
    from transformers.processing_utils import ProcessorMixin

    class Qwen2VLImageProcessorOnly(Qwen2VLProcessor):
        def __init__(self, image_processor=None, tokenizer=None, chat_template=None, **kwargs):
            self.image_token = IMAGE_PAD
            self.video_token = VIDEO_PAD
            self.image_token_id = tokenizer.convert_tokens_to_ids(IMAGE_PAD)
            self.video_token_id = tokenizer.convert_tokens_to_ids(VIDEO_PAD)
            ProcessorMixin.__init__(self, image_processor, tokenizer, chat_template=chat_template)

    AutoProcessor.register(Qwen2VLConfig, Qwen2VLImageProcessorOnly, exist_ok=True)
    _IMAGE_ONLY_CLS = Qwen2VLImageProcessorOnly
    return _IMAGE_ONLY_CLS


_IMAGE_ONLY_CLS = None


def register_image_only_processor() -> None:
    """Make ``AutoProcessor.from_pretrained`` able to load processors saved by :func:`build_vl_processor`."""
    _image_only_processor_class()


def build_vl_processor(
    out_dir: str | os.PathLike | None = None, min_pixels: int = MIN_PIXELS, max_pixels: int = MAX_PIXELS
):
    """A Qwen2-VL processor (slow PIL image processor, no video processor) over the VL tokenizer."""
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    tok = build_vl_tokenizer(None)
    image_processor = Qwen2VLImageProcessorPil(min_pixels=min_pixels, max_pixels=max_pixels)
    processor = _image_only_processor_class()(
        image_processor=image_processor, tokenizer=tok, chat_template=VL_CHAT_TEMPLATE
    )
    if out_dir is not None:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        processor.save_pretrained(str(out_dir))
    return processor


def tiny_qwen2_vl_config(size: str = "xs", vision_size: str = "xs", vocab_size: int | None = None):
    """The ``Qwen2VLConfig`` of a tiny text ``size`` (:data:`verl.workers.tiny.SIZES`) and vision size."""
    from transformers import Qwen2VLConfig

    if size not in SIZES:
        raise ValueError(f"unknown tiny text size {size!r}; known: {sorted(SIZES)}")
    if vision_size not in VISION_SIZES:
        raise ValueError(f"unknown tiny vision size {vision_size!r}; known: {sorted(VISION_SIZES)}")
    tok = build_vl_tokenizer(None)
    text = dict(SIZES[size])
    head_dim = text["hidden_size"] // text["num_attention_heads"]
    # M-RoPE splits each head's rotary half into temporal/height/width sections
    half = head_dim // 2
    section = [half - 2 * (half // 4), half // 4, half // 4]
    ids = {
        name: tok.convert_tokens_to_ids(t)
        for name, t in (
            ("vision_start_token_id", VISION_START),
            ("vision_end_token_id", VISION_END),
            ("image_token_id", IMAGE_PAD),
            ("video_token_id", VIDEO_PAD),
        )
    }
    return Qwen2VLConfig(
        text_config=dict(
            vocab_size=vocab_size if vocab_size is not None else len(tok),
            max_position_embeddings=1024,
            rms_norm_eps=1e-6,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": section},
            attention_dropout=0.0,
            pad_token_id=tok.pad_token_id,
            eos_token_id=tok.eos_token_id,
            bos_token_id=None,
            tie_word_embeddings=True,
            **text,
        ),
        vision_config=dict(hidden_size=text["hidden_size"], **VISION_SIZES[vision_size]),
        tie_word_embeddings=True,
        **ids,
    )


def build_tiny_qwen2_vl(out_dir: str | os.PathLike, size: str = "xs", vision_size: str = "xs", seed: int = 0):
    """Random-init a tiny ``Qwen2VLForConditionalGeneration`` and save it with its processor to
    ``out_dir`` (loadable with ``AutoProcessor`` / ``AutoModelForImageTextToText.from_pretrained``).
    Returns the in-memory model (float32)."""
    import torch
    from transformers import Qwen2VLForConditionalGeneration

    out = Path(out_dir)
    processor = build_vl_processor(out)
    config = tiny_qwen2_vl_config(size, vision_size, vocab_size=len(processor.tokenizer))
    torch.manual_seed(seed)
    model = Qwen2VLForConditionalGeneration(config)
    model.generation_config.pad_token_id = processor.tokenizer.pad_token_id
    model.generation_config.eos_token_id = processor.tokenizer.eos_token_id
    model.save_pretrained(str(out))
    return model


def png(width: int, height: int, colour: str) -> bytes:
    """A PNG of ``width x height`` white pixels with a ``colour`` ellipse in the middle (PIL)."""
    import io

    from PIL import Image, ImageDraw

    im = Image.new("RGB", (width, height), (255, 255, 255))
    ImageDraw.Draw(im).ellipse([width // 4, height // 4, 3 * width // 4, 3 * height // 4], fill=colour)
    buf = io.BytesIO()
    im.save(buf, format="PNG")
    return buf.getvalue()


def image_rows() -> list[dict]:
    """Dataset rows (``prompt`` and ``images``) that cover the cases: images of different sizes (so
    different token counts), a text-only row, and two images in one row."""
    return [
        {"prompt": [{"role": "user", "content": "<image>How many?"}], "images": [{"bytes": png(56, 56, "red")}]},
        {"prompt": [{"role": "user", "content": "Is <image> wide?"}], "images": [{"bytes": png(112, 56, "blue")}]},
        {"prompt": [{"role": "user", "content": "Just text."}], "images": None},
        {
            "prompt": [{"role": "user", "content": "<image> and <image>?"}],
            "images": [{"bytes": png(84, 84, "green")}, {"bytes": png(56, 84, "red")}],
        },
    ]
