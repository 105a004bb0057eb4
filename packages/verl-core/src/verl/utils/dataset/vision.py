"""Image rows for vision-language models: upstream verl's multimodal row contract.

A row names its images under ``data.image_key`` (default ``images``): a list whose items are raw bytes,
``{"bytes": ..., "path": ...}`` dicts (how parquet stores images), file paths, or PIL images. The
prompt's string contents mark where each image goes with ``<image>``; the messages are rewritten to
content parts (``{"type": "image"}``, ``{"type": "text", "text": ...}``) that multimodal chat templates
render. Images are decoded and resized by ``qwen_vl_utils.fetch_image`` (``min_pixels`` /
``max_pixels``; where qwen-vl-utils cannot import, see :func:`load_image`), then the model's processor
turns them into ``pixel_values`` / ``image_grid_thw``.

:func:`get_rope_index` computes Qwen2-VL's 3-D rotary position ids (temporal, height, width) for one
prompt, so they travel with the batch instead of being recomputed inside every model call.

Core does not depend on Pillow or qwen-vl-utils; they come with ``verl-workers[vlm]``.
"""

from __future__ import annotations

import io
import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch

IMAGE_PLACEHOLDER = "<image>"
VIDEO_PLACEHOLDER = "<video>"


#: qwen-vl-utils' defaults: images are resized to a multiple of 28 pixels (14-pixel patches merged 2x2)
IMAGE_FACTOR = 28
DEFAULT_MIN_PIXELS = 4 * 28 * 28
DEFAULT_MAX_PIXELS = 16384 * 28 * 28
MAX_RATIO = 200


def _qwen_vl_utils():
    """qwen_vl_utils, or None when it cannot be imported here: it imports torchvision at module load,
    and PyPI's torchvision does not match every torch (this workspace's CPU torch among them)."""
    try:
        import qwen_vl_utils
    except ImportError:
        return None
    return qwen_vl_utils


def smart_resize(height: int, width: int, min_pixels: int, max_pixels: int, factor: int = IMAGE_FACTOR):
    """Qwen2-VL's resize rule (as in qwen-vl-utils): both sides multiples of ``factor``, the area within
    ``[min_pixels, max_pixels]``, the aspect ratio kept as closely as that allows."""
    if max(height, width) / min(height, width) > MAX_RATIO:
        raise ValueError(f"an image's aspect ratio must be under {MAX_RATIO}, got {width}x{height}")
    h = max(factor, round(height / factor) * factor)
    w = max(factor, round(width / factor) * factor)
    if h * w > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        h = max(factor, math.floor(height / beta / factor) * factor)
        w = max(factor, math.floor(width / beta / factor) * factor)
    elif h * w < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h = math.ceil(height * beta / factor) * factor
        w = math.ceil(width * beta / factor) * factor
    return h, w


def build_vl_messages(messages: Sequence[Mapping[str, Any]], n_images: int, where: str) -> list[dict]:
    """Messages with each ``<image>`` in string contents turned into an image content part.

    The number of placeholders must equal ``n_images`` (the row's images, in order); ``where`` names
    the row in the error. Contents that already are part lists are kept (their image parts count)."""
    if VIDEO_PLACEHOLDER in str(messages):
        raise NotImplementedError(f"{where}: <video> placeholders are not supported yet; only images are")
    out, seen = [], 0
    for m in messages:
        content = m["content"]
        if isinstance(content, str):
            parts: list[dict] = []
            for i, segment in enumerate(content.split(IMAGE_PLACEHOLDER)):
                if i > 0:
                    parts.append({"type": "image"})
                    seen += 1
                if segment:
                    parts.append({"type": "text", "text": segment})
            content = parts
        else:
            seen += sum(1 for p in content if p.get("type") == "image")
        out.append({**m, "content": content})
    if seen != n_images:
        raise ValueError(
            f"{where}: the prompt has {seen} {IMAGE_PLACEHOLDER} placeholder(s) but the row has {n_images} "
            f"image(s); put one {IMAGE_PLACEHOLDER} in the prompt text per image"
        )
    return out


def load_image(value: Any, where: str, min_pixels: int | None = None, max_pixels: int | None = None):
    """One row image (bytes, ``{"bytes", "path"}``, a path, or a PIL image) as an RGB PIL image resized
    to a multiple of 28 pixels within ``[min_pixels, max_pixels]``: by ``qwen_vl_utils.fetch_image``
    where it imports, else by the same rule here (:func:`smart_resize`, bicubic)."""
    try:
        from PIL import Image
    except ImportError as e:
        raise ImportError("image rows need Pillow: `pip install verl-workers[vlm]`") from e

    if isinstance(value, Mapping):
        if value.get("bytes") is not None:
            value = value["bytes"]
        elif value.get("path"):
            value = value["path"]
        else:
            raise ValueError(f"{where}: image dict {sorted(value)} has neither 'bytes' nor 'path'")
    if isinstance(value, bytes | bytearray):
        try:
            value = Image.open(io.BytesIO(value))
            value.load()
        except Exception as e:
            raise ValueError(f"{where}: image bytes do not decode as an image ({e})") from e
    elif isinstance(value, str):
        try:
            value = Image.open(value)
            value.load()
        except OSError as e:
            raise ValueError(f"{where}: cannot open image file {value!r} ({e})") from e
    elif not isinstance(value, Image.Image):
        raise ValueError(
            f"{where}: an image must be bytes, a {{'bytes', 'path'}} dict, a path or a PIL image, "
            f"got {type(value).__name__}"
        )
    image = value.convert("RGB")
    min_pixels = DEFAULT_MIN_PIXELS if min_pixels is None else int(min_pixels)
    max_pixels = DEFAULT_MAX_PIXELS if max_pixels is None else int(max_pixels)
    qwen_vl_utils = _qwen_vl_utils()
    if qwen_vl_utils is not None:
        return qwen_vl_utils.fetch_image({"image": image, "min_pixels": min_pixels, "max_pixels": max_pixels})
    h, w = smart_resize(image.height, image.width, min_pixels, max_pixels)
    return image.resize((w, h), Image.Resampling.BICUBIC)


def get_rope_index(
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    image_grid_thw: torch.Tensor | None,
    *,
    image_token_id: int,
    spatial_merge_size: int,
) -> torch.Tensor:
    """Qwen2-VL's M-RoPE position ids [3, L] for one (left- or right-padded) sequence.

    Text tokens advance all three axes together by one. An image (a run of ``image_token_id`` tokens,
    one per merged patch of its ``image_grid_thw`` row) gets (temporal, row, column) positions offset
    by the current position; the text after it starts at that offset plus the image's larger merged
    side. Padding positions are 0."""
    valid = attention_mask.bool()
    ids = input_ids[valid].tolist()
    grids = iter([] if image_grid_thw is None else image_grid_thw.tolist())
    pieces: list[torch.Tensor] = []
    pos, i = 0, 0
    while i < len(ids):
        if ids[i] != image_token_id:
            j = i
            while j < len(ids) and ids[j] != image_token_id:
                j += 1
            pieces.append(torch.arange(pos, pos + j - i).expand(3, -1))
            pos += j - i
            i = j
            continue
        try:
            t, h, w = next(grids)
        except StopIteration:
            raise ValueError("more image token runs in input_ids than rows in image_grid_thw") from None
        gh, gw = h // spatial_merge_size, w // spatial_merge_size
        n = t * gh * gw
        if ids[i : i + n] != [image_token_id] * n:
            raise ValueError(f"an image of grid {(t, h, w)} needs {n} consecutive image tokens")
        tt = torch.arange(t).view(-1, 1, 1).expand(t, gh, gw).reshape(-1)
        hh = torch.arange(gh).view(1, -1, 1).expand(t, gh, gw).reshape(-1)
        ww = torch.arange(gw).view(1, 1, -1).expand(t, gh, gw).reshape(-1)
        pieces.append(torch.stack([tt, hh, ww]) + pos)
        pos += max(t, gh, gw)
        i += n
    if next(grids, None) is not None:
        raise ValueError("image_grid_thw has more rows than image token runs in input_ids")
    out = torch.zeros(3, input_ids.shape[-1], dtype=torch.long)
    if pieces:
        out[:, valid] = torch.cat(pieces, dim=1)
    return out
