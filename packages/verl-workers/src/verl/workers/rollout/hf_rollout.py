"""Hugging Face rollout: sampling with the trainer's own causal LM, on CPU or GPU.

The decode loop is ours (not ``model.generate``) so that what it samples and the log-probs it
reports are exactly defined:

- prefill the left-padded prompts once, then feed one token per step through the model's KV cache
  (``past_key_values``);
- logits are divided by the temperature, then top-k and top-p filtered, then sampled (or argmax'ed
  when ``do_sample`` is false);
- ``rollout_log_probs`` is ``log_softmax(logits / temperature)`` at the chosen token, i.e. the
  quantity the actor recomputes with a plain forward pass (top-k/top-p do not enter it);
- a row stops at its first EOS (kept in the response, ``response_mask`` = 1 on it); later positions
  hold the pad id and mask 0. The loop stops when every row stopped or ``response_length`` is hit.

When torch.distributed is up with several ranks (hybrid engine, FSDP), every rank keeps stepping
until all ranks are done, because each forward of a sharded module is a collective.

Devices: the engine hands the rollout its compute device; prompts are moved there, the outputs come
back on the CPU. Sampling draws from one generator per worker, seeded with ``rollout.seed + rank``
(:func:`verl.workers.rollout.base.rollout_generator`). The module runs in its compute dtype (FSDP2's
gathered parameters, or the one-rank engine's compute copy, see :func:`gathered_fsdp2_params`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from torch import nn
from verl.workers.engine.hf_model import model_position_ids, vision_inputs
from verl.workers.engine.precision import compute_params
from verl.workers.rollout.base import BaseRollout, generation_tensors, register_rollout, rollout_generator

if TYPE_CHECKING:
    from verl import DataProto


@dataclass(frozen=True)
class SamplingParams:
    """How to pick the next token. ``top_k <= 0`` and ``top_p >= 1`` disable those filters."""

    response_length: int
    do_sample: bool = True
    temperature: float = 1.0
    top_k: int = -1
    top_p: float = 1.0

    def __post_init__(self) -> None:
        if self.response_length < 1:
            raise ValueError(f"response_length must be >= 1, got {self.response_length}")
        if self.temperature <= 0:
            raise ValueError(
                f"temperature must be > 0 (use do_sample=False for greedy), got {self.temperature}"
            )
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")


def filter_logits(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Set logits outside the top-k / nucleus (top-p) set to -inf. ``logits``: [B, V] float."""
    if 0 < top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        probs = torch.softmax(sorted_logits, dim=-1)
        # Drop a token when the tokens ranked above it already reach top_p (the best always stays).
        drop_sorted = (probs.cumsum(dim=-1) - probs) >= top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def _any_rank_running(local_running: bool, group: dist.ProcessGroup | None) -> bool:
    from verl.utils.device import collective_device

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size(group) == 1:
        return local_running
    # on the device the group's backend reduces on: a CPU tensor cannot go through NCCL
    flag = torch.tensor([int(local_running)], dtype=torch.int64, device=collective_device(group))
    dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=group)
    return bool(flag.item())


def _sample(probs: torch.Tensor, generator: torch.Generator | Sequence[torch.Generator] | None) -> torch.Tensor:
    if generator is None or isinstance(generator, torch.Generator):
        return torch.multinomial(probs, 1, generator=generator).squeeze(-1)
    if len(generator) != probs.shape[0]:
        raise ValueError(f"{len(generator)} generators for a batch of {probs.shape[0]} rows")
    return torch.cat([torch.multinomial(probs[i : i + 1], 1, generator=g) for i, g in enumerate(generator)]).squeeze(-1)


@torch.no_grad()
def generate_tokens(
    module: nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    position_ids: torch.Tensor,
    params: SamplingParams,
    eos_token_ids: Sequence[int],
    pad_token_id: int,
    calculate_log_probs: bool = False,
    generator: torch.Generator | Sequence[torch.Generator] | None = None,
    sync_group: dist.ProcessGroup | None = None,
    vision: dict[str, torch.Tensor] | None = None,
    suppress_ids: Sequence[int] = (),
) -> dict[str, torch.Tensor]:
    """Sample responses for left-padded prompts; returns the contract's tensors (see module doc).

    ``generator``: one for the batch, or one per row (then a row's tokens do not depend on which
    other rows share its batch, as for agent-loop requests batched as they arrive).

    ``input_ids``/``attention_mask``/``position_ids`` are [B, P]. Returned tensors are [B, R]
    (``responses``, ``response_mask``, optionally ``rollout_log_probs``) and [B, P + R]
    (``input_ids``, ``attention_mask``, ``position_ids``), plus ``prompts`` [B, P].

    Vision-language models: ``vision`` holds the batch's ``pixel_values`` / ``image_grid_thw`` (see
    ``verl.workers.engine.hf_model.vision_inputs``), fed with the prompt; ``position_ids`` are then
    M-RoPE ids [B, 3, P], and every generated token advances all three axes by one.
    ``suppress_ids``: tokens never sampled (a vision model's image/video placeholders: a sampled one
    would be an image slot without pixels in every later forward).
    """
    if input_ids.shape != attention_mask.shape or input_ids.shape != position_ids.shape[:1] + position_ids.shape[-1:]:
        raise ValueError(
            f"prompt tensors disagree in shape: input_ids {tuple(input_ids.shape)}, attention_mask "
            f"{tuple(attention_mask.shape)}, position_ids {tuple(position_ids.shape)}"
        )
    device = input_ids.device
    batch = input_ids.shape[0]
    eos = torch.tensor(list(eos_token_ids), dtype=torch.long, device=device)
    running = torch.ones(batch, dtype=torch.bool, device=device)
    last_pos = position_ids[..., -1:]
    mask = attention_mask
    tokens: list[torch.Tensor] = []
    gen_mask: list[torch.Tensor] = []
    log_probs: list[torch.Tensor] = []

    out = module(
        input_ids=input_ids, attention_mask=mask, position_ids=model_position_ids(position_ids), use_cache=True,
        logits_to_keep=1, **(vision or {}),
    )
    for step in range(params.response_length):
        logits = out.logits[:, -1, :].float() / params.temperature
        if len(suppress_ids):
            logits[:, list(suppress_ids)] = float("-inf")
        if params.do_sample:
            probs = torch.softmax(filter_logits(logits, params.top_k, params.top_p), dim=-1)
            nxt = _sample(probs, generator)
        else:
            nxt = logits.argmax(dim=-1)
        nxt = torch.where(running, nxt, torch.full_like(nxt, pad_token_id))
        if calculate_log_probs:
            lp = torch.log_softmax(logits, dim=-1).gather(-1, nxt.unsqueeze(-1)).squeeze(-1)
            log_probs.append(torch.where(running, lp, torch.zeros_like(lp)))
        tokens.append(nxt)
        gen_mask.append(running.clone())
        running = running & ~torch.isin(nxt, eos)
        if step + 1 == params.response_length or not _any_rank_running(bool(running.any()), sync_group):
            break
        # Finished rows keep feeding pad tokens (their outputs are discarded) so shapes stay fixed.
        mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
        out = module(
            input_ids=nxt.unsqueeze(-1),
            attention_mask=mask,
            position_ids=model_position_ids(last_pos + step + 1),
            past_key_values=out.past_key_values,
            use_cache=True,
        )

    responses = torch.stack(tokens, dim=1)
    response_mask = torch.stack(gen_mask, dim=1).to(attention_mask.dtype)
    r = responses.shape[1]
    resp_pos = last_pos + torch.arange(1, r + 1, device=device)
    return generation_tensors(
        input_ids, attention_mask, responses, response_mask,
        torch.cat([position_ids, resp_pos.to(position_ids.dtype)], dim=-1),
        torch.stack(log_probs, dim=1) if calculate_log_probs else None,
    )  # fmt: skip


@contextmanager
def gathered_fsdp2_params(module: nn.Module, reshard_after_forward: bool = True) -> Iterator[None]:
    """Keep an FSDP2 module's parameters unsharded for a whole generation (collective).

    Without this every decode step all-gathers every layer again (``reshard_after_forward``), which
    doubles generation time even on one rank. On exit the parameters are resharded and the layers'
    ``reshard_after_forward`` is set back to ``reshard_after_forward`` (the engine's setting). A module
    without FSDP2 sharding runs on its compute copy when the one-rank mixed-precision engine trains it
    (``verl.workers.engine.precision.compute_params``) and passes through untouched otherwise.
    """
    from torch.distributed.fsdp import FSDPModule

    fsdp_modules = [m for m in module.modules() if isinstance(m, FSDPModule)]
    if not fsdp_modules:
        with compute_params(module):
            yield
        return
    # The root too: the engine passes reshard_after_forward to fully_shard explicitly, which turns off
    # FSDP2's keep-the-root-gathered heuristic, so the root would reshard after every decode step and
    # all-gather again on the next (a collective: ranks decoding different step counts, as agent loops
    # do, would deadlock on it).
    for m in fsdp_modules:
        m.set_reshard_after_forward(False, recurse=False)
        m.unshard()
    try:
        yield
    finally:
        for m in fsdp_modules:
            m.reshard()
            m.set_reshard_after_forward(reshard_after_forward, recurse=False)


def _as_id_list(value: Any) -> list[int]:
    if value is None:
        return []
    if isinstance(value, int):
        return [value]
    return [int(v) for v in value]


def stop_and_pad_ids(module: nn.Module, tokenizer: Any, engine: str) -> tuple[list[int], int]:
    """The ids that end a response (generation config EOS plus the tokenizer's) and the pad id."""
    gen_cfg = module.generation_config
    eos = _as_id_list(gen_cfg.eos_token_id) if gen_cfg is not None else []
    if tokenizer is not None and tokenizer.eos_token_id is not None:
        eos = sorted(set(eos) | {int(tokenizer.eos_token_id)})
    if not eos:
        eos = _as_id_list(module.config.eos_token_id)
    if not eos:
        raise ValueError(
            f"{engine} needs an EOS token id: set eos_token_id in the model's generation_config/config "
            "or pass a tokenizer with eos_token"
        )
    pad = tokenizer.pad_token_id if tokenizer is not None else None
    if pad is None:
        pad = module.config.pad_token_id
    return eos, int(pad) if pad is not None else eos[0]


def sampling_params_for(cfg: Any, meta_info: dict[str, Any]) -> SamplingParams:
    """The sampling settings for one call from ``actor_rollout_ref.rollout`` (``cfg``): config, then
    ``meta_info`` overrides, then greedy / ``val_kwargs`` when ``meta_info["validate"]``."""
    length = int(meta_info.get("response_length", cfg.response_length))
    temperature = float(meta_info.get("temperature", cfg.temperature))
    if meta_info.get("validate", False):
        val = cfg.val_kwargs
        return SamplingParams(
            response_length=length,
            do_sample=bool(meta_info.get("do_sample", val.do_sample)),
            temperature=float(val.temperature) if val.temperature > 0 else temperature,
            top_k=int(val.top_k),
            top_p=float(val.top_p),
        )
    return SamplingParams(
        response_length=length,
        do_sample=bool(meta_info.get("do_sample", cfg.do_sample)),
        temperature=temperature,
        top_k=int(meta_info.get("top_k", cfg.top_k)),
        top_p=float(meta_info.get("top_p", cfg.top_p)),
    )


@register_rollout("hf")
class HFRollout(BaseRollout):
    """Rollout on the trainer's own HF causal LM (``module`` is used as-is, never copied).

    ``config`` is ``actor_rollout_ref.rollout`` (keys: ``temperature``, ``top_k``, ``top_p``,
    ``do_sample``, ``response_length``, ``calculate_log_probs``, ``val_kwargs.{temperature, top_k,
    top_p, do_sample}``). Per-call overrides come from ``prompts.meta_info``: ``do_sample``,
    ``validate`` (use ``val_kwargs``), ``temperature``, ``top_k``, ``top_p``, ``response_length``.
    ``device``: where the module computes (the training engine's device; default: its first parameter's).
    ``rank``: the data-parallel rank that offsets ``rollout.seed`` (default: the torch.distributed rank).
    """

    shares_trainer_weights = True

    def __init__(
        self,
        module: nn.Module,
        config: Any,
        tokenizer: Any = None,
        *,
        reshard_after_forward: bool = True,
        device: torch.device | str | None = None,
        rank: int | None = None,
        **_: Any,
    ):
        self.module = module
        self.config = config
        self.device = torch.device(device) if device is not None else next(module.parameters()).device
        if rank is None:
            rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
        #: every draw of this worker's sampling, seeded once from rollout.seed + rank
        self.generator = rollout_generator(config, rank, self.device)
        # the training engine's FSDP2 setting, restored after each generation (see gathered_fsdp2_params)
        self.reshard_after_forward = reshard_after_forward
        self.eos_token_ids, self.pad_token_id = stop_and_pad_ids(module, tokenizer, type(self).__name__)
        #: a vision-language model's image/video placeholder tokens, never sampled (see generate_tokens)
        self.suppress_ids = [
            int(i) for i in (getattr(module.config, "image_token_id", None), getattr(module.config, "video_token_id", None))
            if i is not None
        ]

    def sampling_params(self, meta_info: dict[str, Any]) -> SamplingParams:
        """The sampling settings for one call (see :func:`sampling_params_for`)."""
        return sampling_params_for(self.config, meta_info)

    def decode_inputs(
        self, prompts: DataProto
    ) -> tuple[SamplingParams, list[int], list[tuple[torch.Tensor, ...]]]:
        """Sampling parameters, stop ids, and the prompts cut into ``rollout.micro_batch_size`` pieces of
        ``(input_ids, attention_mask, position_ids)``: what every decode loop starts from."""
        batch = prompts.batch
        rows = batch["input_ids"].shape[0]
        step = int(self.config.micro_batch_size or rows) or 1
        keys = ("input_ids", "attention_mask", "position_ids")
        micro_batches = [tuple(batch[k][i : i + step].to(self.device) for k in keys) for i in range(0, rows, step)]
        eos = [] if self.config.ignore_eos else self.eos_token_ids
        return self.sampling_params(prompts.meta_info), eos, micro_batches

    def vision_micro_batches(self, prompts: DataProto, n_micro: int) -> list[dict[str, torch.Tensor] | None]:
        """Per micro-batch of :meth:`decode_inputs`, the vision kwargs of its rows (None without
        ``multi_modal_inputs``: a text model)."""
        rows_mm = prompts.non_tensor_batch.get("multi_modal_inputs")
        if rows_mm is None:
            return [None] * n_micro
        step = int(self.config.micro_batch_size or len(rows_mm)) or 1
        return [vision_inputs(rows_mm[i : i + step], self.device) for i in range(0, len(rows_mm), step)]

    def generate_sequences(self, prompts: DataProto) -> DataProto:
        params, eos, micro_batches = self.decode_inputs(prompts)
        vision = self.vision_micro_batches(prompts, len(micro_batches))
        was_training = self.module.training
        self.module.eval()
        try:
            with gathered_fsdp2_params(self.module, self.reshard_after_forward):
                chunks = [
                    generate_tokens(
                        self.module,
                        input_ids,
                        attention_mask,
                        position_ids,
                        params,
                        eos,
                        self.pad_token_id,
                        calculate_log_probs=bool(self.config.calculate_log_probs),
                        generator=self.generator,
                        vision=mm,
                        suppress_ids=self.suppress_ids,
                    )
                    for (input_ids, attention_mask, position_ids), mm in zip(micro_batches, vision)
                ]
        finally:
            self.module.train(was_training)
        tensors = concat_generations(chunks, self.pad_token_id)
        from verl import DataProto

        return DataProto.from_dict(tensors={k: v.cpu() for k, v in tensors.items()})


def concat_generations(chunks: list[dict[str, torch.Tensor]], pad_token_id: int) -> dict[str, torch.Tensor]:
    """Join generation outputs of several micro-batches, right-padding responses to the longest."""
    if len(chunks) == 1:
        return chunks[0]
    r = max(c["responses"].shape[1] for c in chunks)
    fill = {"responses": pad_token_id, "response_mask": 0, "rollout_log_probs": 0.0}
    out: dict[str, list[torch.Tensor]] = {k: [] for k in chunks[0]}
    for c in chunks:
        extra = r - c["responses"].shape[1]
        p = c["prompts"].shape[1]
        for key, value in c.items():
            if extra and key in fill:
                value = torch.nn.functional.pad(value, (0, extra), value=fill[key])
            elif extra and key in ("input_ids", "attention_mask"):
                value = torch.nn.functional.pad(
                    value, (0, extra), value=pad_token_id if key == "input_ids" else 0
                )
            elif extra and key == "position_ids":
                last = value[..., p - 1 : p]
                steps = torch.arange(1, r + 1, dtype=value.dtype, device=value.device)
                value = torch.cat([value[..., :p], last + steps], dim=-1)
            out[key].append(value)
    return {k: torch.cat(v, dim=0) for k, v in out.items()}
