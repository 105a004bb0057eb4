"""The RL prompt dataset: parquet/jsonl rows in upstream verl's contract -> left-padded prompt tensors.

The row contract is checked by `verl.utils.dataset.rows.check_row`. The tokenizer (or processor) is passed in, so
core does not depend on transformers; anything with ``apply_chat_template`` and ``__call__`` works.
"""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path
from typing import Any

import numpy as np
import torch

from verl.utils.dataset.rows import DatasetRowError, as_file_list, check_row, read_rows

__all__ = ["DatasetRowError", "RLHFDataset", "check_row", "collate_fn", "create_rl_dataset", "read_rows"]

logger = logging.getLogger(__name__)

TRUNCATION_MODES = ("error", "left", "right", "middle")


# ------------------------------------------------------------------------------------------ dataset
def _cfg_get(config: Any, key: str, default: Any) -> Any:
    if config is None:
        return default
    value = config.get(key, default)
    return default if value is None else value


class RLHFDataset(torch.utils.data.Dataset):
    """Prompts for RL: each item holds left-padded ``input_ids``/``attention_mask``/``position_ids`` of
    length ``max_prompt_length`` plus the row's non-tensor fields (see `collate_fn`).

    ``config`` is the ``data`` section (DictConfig or dict): ``prompt_key``, ``max_prompt_length``,
    ``filter_overlong_prompts``, ``truncation`` (error | left | right | middle), ``return_raw_input_ids``,
    ``return_full_prompt``, ``apply_chat_template_kwargs``.

    With a multimodal ``processor`` (Qwen2-VL family): rows may carry images under ``image_key`` (see
    :mod:`verl.utils.dataset.vision`); every item then has 3-D rotary ``position_ids`` [3, L], and, with
    ``return_multi_modal_inputs``, ``multi_modal_inputs`` (the processor's ``pixel_values`` /
    ``image_grid_thw``; an empty dict for text-only rows) and ``multi_modal_data`` (``{"image": [PIL]}``,
    what generation engines take). ``mm_processor_kwargs`` go to the image loading
    (``min_pixels`` / ``max_pixels``).
    """

    def __init__(self, data_files, tokenizer, config=None, processor=None, max_samples: int = -1):
        self.tokenizer = tokenizer
        self.processor = processor
        self.prompt_key = _cfg_get(config, "prompt_key", "prompt")
        self.max_prompt_length = int(_cfg_get(config, "max_prompt_length", 1024))
        self.truncation = _cfg_get(config, "truncation", "error")
        self.filter_overlong = bool(_cfg_get(config, "filter_overlong_prompts", False))
        self.return_raw_input_ids = bool(_cfg_get(config, "return_raw_input_ids", False))
        self.return_full_prompt = bool(_cfg_get(config, "return_full_prompt", False))
        self.chat_kwargs = dict(_cfg_get(config, "apply_chat_template_kwargs", {}))
        self.image_key = _cfg_get(config, "image_key", "images")
        self.video_key = _cfg_get(config, "video_key", "videos")
        self.return_multi_modal_inputs = bool(_cfg_get(config, "return_multi_modal_inputs", True))
        self.mm_kwargs = dict(_cfg_get(config, "mm_processor_kwargs", {}))
        unknown = sorted(set(self.mm_kwargs) - {"min_pixels", "max_pixels"})
        if unknown:
            raise ValueError(f"data.mm_processor_kwargs has unknown keys {unknown}; known: min_pixels, max_pixels")
        if self.truncation not in TRUNCATION_MODES:
            raise ValueError(
                f"data.truncation={self.truncation!r} is not one of {', '.join(TRUNCATION_MODES)}"
            )
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        if pad is None:
            raise ValueError(
                "the tokenizer has neither a pad_token_id nor an eos_token_id to pad prompts with"
            )
        self.pad_token_id = int(pad)

        self.data_files = as_file_list(data_files)
        self.rows: list[dict] = []
        self.where: list[str] = []
        for f in self.data_files:
            for label, row in read_rows(f):
                where = f"{f}: {label}"
                self.rows.append(check_row(self.map_row(row, f), where, self.prompt_key))
                self.where.append(where)
        if max_samples is not None and max_samples > 0:
            self.rows, self.where = self.rows[:max_samples], self.where[:max_samples]
        # Token ids are cached once computed: filtering needs them all, and items are re-read every epoch.
        self._ids: list[list[int] | None] = [None] * len(self.rows)
        if self.filter_overlong:
            self._filter_overlong()
        if not self.rows:
            raise ValueError(
                f"no prompts left in {self.data_files} (after filtering overlong prompts: {self.filter_overlong})"
            )

    def map_row(self, row: dict, data_file: str) -> dict:
        """A subclass's per-row preprocessing, before the row contract is checked (upstream's custom
        datasets map their rows while reading, e.g. ReTool's answer-format instruction). Identity here."""
        return row

    def _filter_overlong(self) -> None:
        keep = [i for i in range(len(self.rows)) if len(self.prompt_ids(i)) <= self.max_prompt_length]
        dropped = len(self.rows) - len(keep)
        if dropped:
            logger.warning(
                "filtered %d of %d prompts longer than max_prompt_length=%d tokens from %s",
                dropped,
                len(self.rows),
                self.max_prompt_length,
                self.data_files,
            )
        self.rows = [self.rows[i] for i in keep]
        self.where = [self.where[i] for i in keep]
        self._ids = [self._ids[i] for i in keep]

    def __len__(self) -> int:
        return len(self.rows)

    def _images(self, index: int) -> list:
        row = self.rows[index]
        if row.get(self.video_key) is not None and len(row[self.video_key]):
            raise NotImplementedError(f"{self.where[index]}: video rows ({self.video_key!r}) are not supported yet")
        images = row.get(self.image_key)
        if images is None:
            return []
        if self.processor is None:
            raise ValueError(
                f"{self.where[index]}: the row has images ({self.image_key!r}) but the model has no multimodal "
                "processor; use a vision-language model path"
            )
        return list(images)

    def messages(self, index: int) -> list:
        """The row's prompt messages; for a multimodal processor, with ``<image>`` turned into image parts."""
        messages = self.rows[index][self.prompt_key]
        if self.processor is None:
            return messages
        from verl.utils.dataset.vision import build_vl_messages

        return build_vl_messages(messages, len(self._images(index)), self.where[index])

    def prompt_text(self, index: int) -> str:
        """The row's messages rendered by the chat template, with the generation prompt appended."""
        templater = self.processor if self.processor is not None else self.tokenizer
        messages = self.messages(index)
        return templater.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=False, **self.chat_kwargs
        )

    def prompt_ids(self, index: int) -> list[int]:
        """Token ids of `prompt_text` (no truncation), cached."""
        ids = self._ids[index]
        if ids is None:
            text = self.prompt_text(index)
            if self.processor is not None:
                ids = self._process(index)[0]
            else:
                ids = list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
            self._ids[index] = ids
        return ids

    def _process(self, index: int) -> tuple[list[int], dict, list]:
        """Token ids, the processor's vision tensors and the loaded images of a row (processor path)."""
        from verl.utils.dataset.vision import load_image

        where = self.where[index]
        images = [load_image(im, f"{where}: {self.image_key}[{k}]", **self.mm_kwargs)
                  for k, im in enumerate(self._images(index))]
        out = self.processor(text=[self.prompt_text(index)], images=images or None, return_tensors="pt",
                             add_special_tokens=False)
        mm = {k: out[k] for k in ("pixel_values", "image_grid_thw") if k in out}
        return out["input_ids"][0].tolist(), mm, images

    def _truncate(self, ids: list[int], index: int) -> list[int]:
        limit = self.max_prompt_length
        if len(ids) <= limit:
            return ids
        if self.processor is not None and self._images(index):
            raise ValueError(
                f"{self.where[index]}: prompt with images is {len(ids)} tokens, longer than "
                f"data.max_prompt_length={limit}; image tokens cannot be truncated: raise max_prompt_length, "
                "lower data.mm_processor_kwargs.max_pixels, or set data.filter_overlong_prompts=true"
            )
        if self.truncation == "left":
            return ids[-limit:]
        if self.truncation == "right":
            return ids[:limit]
        if self.truncation == "middle":
            head = limit // 2
            return ids[:head] + ids[len(ids) - (limit - head) :]
        raise ValueError(
            f"{self.where[index]}: prompt is {len(ids)} tokens, longer than data.max_prompt_length={limit}; "
            "raise max_prompt_length, set data.filter_overlong_prompts=true, or data.truncation=left|right|middle"
        )

    def __getitem__(self, index: int) -> dict[str, Any]:
        row = self.rows[index]
        mm_inputs, images = None, []
        if self.processor is not None:
            ids, mm_inputs, images = self._process(index)
            self._ids[index] = ids
        ids = self._truncate(self.prompt_ids(index), index)
        n_pad = self.max_prompt_length - len(ids)
        input_ids = torch.tensor([self.pad_token_id] * n_pad + ids, dtype=torch.long)
        attention_mask = torch.tensor([0] * n_pad + [1] * len(ids), dtype=torch.long)
        position_ids = torch.clamp(torch.cumsum(attention_mask, dim=0) - 1, min=0)
        if self.processor is not None:
            position_ids = self._rope_index(input_ids, attention_mask, mm_inputs.get("image_grid_thw"))
        extra_info = dict(row.get("extra_info") or {})
        item: dict[str, Any] = {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "position_ids": position_ids,
            "raw_prompt": row[self.prompt_key],
            "data_source": row["data_source"],
            "reward_model": dict(row["reward_model"]),
            "extra_info": extra_info,
            "ability": row.get("ability"),
            "index": extra_info.get("index", index),
        }
        if row.get("agent_name") is not None:
            item["agent_name"] = row["agent_name"]
        tools_kwargs = row.get("tools_kwargs", extra_info.get("tools_kwargs"))
        if tools_kwargs is not None:
            item["tools_kwargs"] = tools_kwargs
        if images and not self.return_multi_modal_inputs:
            # the engines read the pixels from multi_modal_inputs; without them the image tokens have no features
            raise ValueError(
                f"{self.where[index]}: the row has images but data.return_multi_modal_inputs=false drops the "
                "pixel inputs the model needs; set it to true"
            )
        if self.processor is not None and self.return_multi_modal_inputs:
            item["multi_modal_inputs"] = mm_inputs
            item["multi_modal_data"] = {"image": images} if images else {}
        if self.return_raw_input_ids:
            item["raw_prompt_ids"] = ids
        if self.return_full_prompt:
            item["full_prompts"] = self.prompt_text(index)
        return item

    def _rope_index(self, input_ids, attention_mask, image_grid_thw) -> torch.Tensor:
        from verl.utils.dataset.vision import get_rope_index

        image_processor = self.processor.image_processor
        return get_rope_index(
            input_ids, attention_mask, image_grid_thw,
            image_token_id=int(self.processor.image_token_id),
            spatial_merge_size=int(image_processor.merge_size),
        )


def collate_fn(items: list[dict[str, Any]]) -> dict[str, Any]:
    """Stack tensors; gather everything else into numpy object arrays (``DataProto.from_single_dict`` input).

    A key present in some items only is filled with None in the others.
    """
    keys: dict[str, None] = {}
    for it in items:
        keys.update(dict.fromkeys(it))
    out: dict[str, Any] = {}
    for k in keys:
        values = [it.get(k) for it in items]
        if all(isinstance(v, torch.Tensor) for v in values):
            out[k] = torch.stack(values)
        else:
            arr = np.empty(len(values), dtype=object)
            for i, v in enumerate(values):  # element-wise so lists/dicts are not broadcast into a 2-D array
                arr[i] = v
            out[k] = arr
    return out


def create_rl_dataset(
    data_files, data_config, tokenizer, processor=None, is_train: bool = True
) -> RLHFDataset:
    """Build the dataset the ``data`` config asks for: `RLHFDataset`, or ``data.custom_cls`` (a class in a
    python file, constructed with the same arguments)."""
    cls = RLHFDataset
    custom = _cfg_get(data_config, "custom_cls", {}) or {}
    if custom.get("path"):
        cls = _load_class(custom["path"], custom.get("name"))
    max_samples = int(_cfg_get(data_config, "train_max_samples" if is_train else "val_max_samples", -1))
    return cls(data_files, tokenizer, config=data_config, processor=processor, max_samples=max_samples)


def _load_class(path: str, name: str | None):
    file = Path(path).expanduser()
    if not file.is_file():
        raise FileNotFoundError(f"data.custom_cls.path={path}: no such file")
    if not name:
        raise ValueError(f"data.custom_cls.name is required with data.custom_cls.path={path}")
    spec = importlib.util.spec_from_file_location(f"verl_custom_dataset_{file.stem}", file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if name not in vars(module):
        raise AttributeError(f"data.custom_cls.name={name!r} is not defined in {path}")
    return vars(module)[name]
