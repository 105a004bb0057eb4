"""Image rows for vision-language models: upstream verl's multimodal row contract.

A row names its images under ``data.image_key`` (default ``images``): a list whose items are raw bytes,
``{"bytes": ..., "path": ...}`` dicts (how parquet stores images), file paths, or PIL images. The
prompt's string contents mark where each image goes with ``<image>``; the messages are rewritten to
content parts (``{"type": "image"}``, ``{"type": "text", "text": ...}``) that multimodal chat templates
render. Images are decoded and resized by ``qwen_vl_utils.fetch_image`` and videos (a file or a list of
frames) by ``qwen_vl_utils.fetch_video``, as upstream's ``process_image`` / ``process_video`` do
(``min_pixels`` / ``max_pixels``, ``fps`` / ``nframes``); then the model's processor turns them into
``pixel_values`` / ``image_grid_thw``.

:func:`get_rope_index` computes Qwen2-VL's 3-D rotary position ids (temporal, height, width) for one
prompt, so they travel with the batch instead of being recomputed inside every model call.

Pillow, qwen-vl-utils and the torchvision it imports come with ``verl-core[vlm]`` (which
``verl-workers[vlm]`` includes); without them image rows are an error naming that extra.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from typing import Any

import torch

IMAGE_PLACEHOLDER = "<image>"
VIDEO_PLACEHOLDER = "<video>"


VLM_INSTALL = "pip install 'verl-core[vlm]'"


def _vision_process():
    """qwen-vl-utils' vision module (it imports torchvision, which must match the installed torch)."""
    try:
        from qwen_vl_utils import vision_process
    except ImportError as e:
        raise ImportError(
            f"image and video rows need qwen-vl-utils and torchvision ({e}): {VLM_INSTALL}"
        ) from e
    return vision_process


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


def _pixel_limits(min_pixels: int | None, max_pixels: int | None) -> dict[str, int]:
    out = {}
    if min_pixels is not None:
        out["min_pixels"] = int(min_pixels)
    if max_pixels is not None:
        out["max_pixels"] = int(max_pixels)
    return out


def _to_pil(value: Any, where: str):
    """A row image (bytes, ``{"bytes", "path"}``, a path, or a PIL image) as a loaded PIL image."""
    try:
        from PIL import Image
    except ImportError as e:
        raise ImportError(f"image rows need Pillow: {VLM_INSTALL}") from e

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
    return value


def load_image(
    value: Any, where: str, min_pixels: int | None = None, max_pixels: int | None = None, image_patch_size: int = 14
):
    """One row image (bytes, ``{"bytes", "path"}``, a path, or a PIL image) as an RGB PIL image resized
    by ``qwen_vl_utils.fetch_image``: both sides multiples of ``2 * image_patch_size`` (28 for Qwen2-VL),
    the area within ``[min_pixels, max_pixels]`` (qwen-vl-utils' defaults when not given)."""
    image = _to_pil(value, where)
    vision_process = _vision_process()
    try:
        return vision_process.fetch_image(
            {"image": image, **_pixel_limits(min_pixels, max_pixels)}, image_patch_size=image_patch_size
        )
    except ValueError as e:  # e.g. an aspect ratio over qwen-vl-utils' limit
        raise ValueError(f"{where}: {e}") from e


def load_video(
    value: Any,
    where: str,
    min_pixels: int | None = None,
    max_pixels: int | None = None,
    fps: float | None = None,
    nframes: int | None = None,
    image_patch_size: int = 14,
) -> tuple[torch.Tensor, float]:
    """One row video as ``(frames [T, 3, H, W] uint8, sample fps)`` by ``qwen_vl_utils.fetch_video``:
    ``value`` is a video file path or a list of frames (each as :func:`load_image` takes them); frames are
    sampled at ``fps`` (or ``nframes`` of them) and resized to multiples of ``2 * image_patch_size``."""
    if isinstance(value, str):
        video: Any = value
    elif isinstance(value, list | tuple) and value:
        video = [_to_pil(frame, f"{where}[{i}]") for i, frame in enumerate(value)]
    else:
        raise ValueError(f"{where}: a video must be a file path or a non-empty list of frames, got {type(value).__name__}")
    ele: dict[str, Any] = {"video": video, **_pixel_limits(min_pixels, max_pixels)}
    if fps is not None:
        ele["fps"] = float(fps)
    if nframes is not None:
        ele["nframes"] = int(nframes)
    vision_process = _vision_process()
    try:
        frames, sample_fps = vision_process.fetch_video(
            ele, image_patch_size=image_patch_size, return_video_sample_fps=True
        )
    except (ValueError, RuntimeError, OSError) as e:
        raise ValueError(f"{where}: cannot load the video ({e})") from e
    return frames, float(sample_fps)


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
