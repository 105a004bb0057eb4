"""Partial rollouts on the native engine: a generation that can be paused, given new weights, and resumed.

Asynchronous RL (recipes/fully_async) updates the rollout's weights while generations are in flight.
Rather than waiting for them to finish or throwing them away, the rollout pauses them, loads the new
weights and continues: tokens sampled after the resume come from the new weights. The API::

    gen = ResumableGeneration(rollout, prompts)   # a NativeRollout and left-padded prompts (DataProto)
    gen.step(8)            # decode up to 8 more tokens per unfinished row; True once every row finished
    gen.finished           # bool [B]: rows that stopped (EOS or response_length)
    gen.pause()            # drop the KV cache and the weight snapshot: the module's weights may now change
    gen.resume()           # re-read the weights and prefill prompt + tokens so far under them
    gen.result(rows)       # the contract's tensors (docs/contracts.md) for ``rows`` (default: all)

Same sampling semantics as :func:`~verl.workers.rollout.native_rollout.native_generate` (whose
decoder math and sampler it reuses): an uninterrupted ``step(response_length)`` samples what
``native_generate`` samples. What a pause costs is one prefill of prompt + generated tokens on resume
(the old keys and values were computed by the old weights, so they are recomputed, as upstream's
partial rollout re-submits the prefix). ``result`` adds ``token_segments`` [N, R] (int64): which decode
segment sampled each token, 0 before the first pause, k after the k-th resume, -1 on padding; a caller
that numbers its weight versions maps segments to versions (every token's producing policy is known).

While running (between ``resume``/construction and ``pause``) an FSDP2 module's parameters stay
gathered (one gather per segment, as ``generate_sequences`` gathers once per call), so the weights must
change only while paused. Modules the native loop cannot run (``unsupported_reason``) are refused.
"""

from __future__ import annotations

from contextlib import ExitStack
from typing import TYPE_CHECKING

import torch
from verl.workers.rollout.hf_rollout import gathered_fsdp2_params
from verl.workers.rollout.native_rollout import (
    COMPACT_FRACTION,
    decoder_forward,
    decoder_weights,
    sample_next,
    unsupported_reason,
)

if TYPE_CHECKING:
    from verl import DataProto
    from verl.workers.rollout.native_rollout import NativeRollout


class ResumableGeneration:
    """One batch of prompts decoded in segments; see the module doc. Not thread-safe.

    ``rollout``: the :class:`NativeRollout` whose module, sampling config, EOS and pad ids are used;
    ``prompts``: left-padded ``input_ids`` / ``attention_mask`` / ``position_ids`` and sampling
    ``meta_info`` (as for ``generate_sequences``); ``generator``: the sampling RNG (None: torch's global).
    """

    def __init__(self, rollout: NativeRollout, prompts: DataProto, generator: torch.Generator | None = None):
        reason = unsupported_reason(rollout.module)
        if reason is not None:
            raise NotImplementedError(f"partial rollouts need the native decode loop: {reason}")
        self.rollout = rollout
        self.module = rollout.module
        self.params = rollout.sampling_params(prompts.meta_info)
        self.eos_ids = [] if rollout.config.ignore_eos else list(rollout.eos_token_ids)
        self.pad = int(rollout.pad_token_id)
        self.generator = generator
        self.with_log_probs = bool(rollout.config.calculate_log_probs)
        b = prompts.batch
        self.input_ids, self.attention_mask = b["input_ids"], b["attention_mask"]
        position_ids = b["position_ids"]
        n, self.p = self.input_ids.shape
        self.r_max = self.params.response_length
        steps = torch.arange(1, self.r_max + 1, dtype=position_ids.dtype)
        self.all_pos = torch.cat([position_ids, position_ids[:, -1:] + steps], dim=1)
        self.responses = torch.full((n, self.r_max), self.pad, dtype=torch.long)
        self.response_mask = torch.zeros((n, self.r_max), dtype=self.attention_mask.dtype)
        self.log_probs = torch.zeros((n, self.r_max), dtype=torch.float32)
        self.segments = torch.full((n, self.r_max), -1, dtype=torch.long)
        self.finished = torch.zeros(n, dtype=torch.bool)
        self.length = 0  # tokens every unfinished row has sampled so far
        self.segment = 0
        self._stack: ExitStack | None = None
        self._prefill()

    # ------------------------------------------------------------------ public API
    @property
    def paused(self) -> bool:
        return self._stack is None and not self.done

    @property
    def done(self) -> bool:
        return bool(self.finished.all())

    def step(self, max_new_tokens: int) -> bool:
        """Decode up to ``max_new_tokens`` tokens for every unfinished row; True once all rows finished."""
        if self.done:
            return True
        if self._stack is None:
            raise RuntimeError("the generation is paused: call resume() before step()")
        for _ in range(int(max_new_tokens)):
            if self._decode_one():
                self._release()
                return True
        return False

    def pause(self) -> None:
        """Stop at a token boundary: the KV cache and weight snapshot are dropped (weights may change)."""
        if self._stack is not None:
            self._release()

    def resume(self) -> None:
        """Continue with the module's current weights (a new segment): prefill prompt + tokens so far."""
        if self.done:
            return
        if self._stack is not None:
            raise RuntimeError("resume() without pause(): the generation is running")
        self.segment += 1
        self._prefill()

    def result(self, rows: torch.Tensor | list[int] | None = None) -> DataProto:
        """The contract's tensors for finished ``rows`` (original row order; default every row), R = the
        longest of their responses, plus ``rollout_log_probs`` (with ``calculate_log_probs``) and
        ``token_segments``. CPU tensors."""
        from verl import DataProto

        device = self.finished.device
        idx = torch.arange(len(self.finished), device=device)
        if rows is not None:
            idx = torch.as_tensor(rows, dtype=torch.long).to(device)
        if not bool(self.finished[idx].all()):
            raise RuntimeError(f"rows {idx[~self.finished[idx]].tolist()} are still generating")
        mask = self.response_mask[idx]
        r = max(int(mask.sum(-1).max()) if len(idx) else 0, 1)
        responses, mask = self.responses[idx, :r], mask[:, :r]
        tensors = {
            "prompts": self.input_ids[idx],
            "responses": responses,
            "response_mask": mask,
            "input_ids": torch.cat([self.input_ids[idx], responses], dim=1),
            "attention_mask": torch.cat([self.attention_mask[idx], mask], dim=1),
            "position_ids": self.all_pos[idx, : self.p + r],
            "token_segments": self.segments[idx, :r],
        }
        if self.with_log_probs:
            tensors["rollout_log_probs"] = self.log_probs[idx, :r]
        return DataProto.from_dict(tensors={k: v.cpu() for k, v in tensors.items()})

    # ------------------------------------------------------------------ decoding
    # no_grad per call, not in the stack held between calls: a grad mode left off between step() calls
    # would leak into whatever else runs on this thread (a colocated update, a test after this one)
    @torch.no_grad()
    def _prefill(self) -> None:
        """Snapshot the weights and run prompt + sampled tokens of the unfinished rows through them."""
        stack = ExitStack()
        stack.enter_context(gathered_fsdp2_params(self.module, self.rollout.reshard_after_forward))
        self._stack = stack
        w = self._w = decoder_weights(self.module)
        device, dtype = w.embed.device, w.embed.dtype
        self._move_state(device)  # once: the state lives where the module computes
        self._rows = (~self.finished).nonzero().squeeze(-1)
        self._running = torch.ones(len(self._rows), dtype=torch.bool, device=device)
        rows, t = self._rows, self.p + self.length
        ids = torch.cat([self.input_ids[rows], self.responses[rows, : self.length]], dim=1)
        cos, sin = w.rotary(w.embed[:1], self.all_pos[rows])
        self._cos, self._sin = cos.unsqueeze(1), sin.unsqueeze(1)
        prompt_ok = self.attention_mask[rows].bool()
        key_ok = torch.cat(
            [prompt_ok, torch.ones((len(rows), self.r_max), dtype=torch.bool, device=device)], 1
        )
        self._key_bias = torch.zeros(key_ok.shape, dtype=dtype, device=device).masked_fill_(
            ~key_ok, float("-inf")
        )
        self._cache = torch.empty(
            (len(w.layers), 2, len(rows), w.n_kv_heads, self.p + self.r_max, w.head_dim),
            dtype=dtype,
            device=device,
        )
        causal = torch.ones((t, t), dtype=torch.bool, device=device).tril()
        # a pad query would see no key (NaN in softmax): let it see itself, as native_generate does
        mask = (causal & key_ok[:, None, :t]) | torch.eye(t, dtype=torch.bool, device=device)
        self._logits = decoder_forward(
            w, ids, self._cos[:, :, :t], self._sin[:, :, :t], self._cache, 0, mask.unsqueeze(1)
        )
        self._eos = torch.tensor(self.eos_ids, dtype=torch.long, device=device)

    @torch.no_grad()
    def _decode_one(self) -> bool:
        """Sample one token per active row and run it through the model; True when every row stopped.

        Mirrors ``native_generate``'s loop (same draws, same compaction points), so an uninterrupted
        generation samples the same tokens from the same generator state."""
        rows, running, step = self._rows, self._running, self.length
        tok, lp = sample_next(self._logits, self.params, self.generator, want_log_probs=self.with_log_probs)
        live = rows[running]
        self.responses[live, step] = tok[running]
        self.response_mask[live, step] = 1
        self.segments[live, step] = self.segment
        if lp is not None:
            self.log_probs[live, step] = lp[running].float()
        self.length = step + 1
        still = running & ~torch.isin(tok, self._eos)
        if self.length == self.r_max:
            still = torch.zeros_like(still)
        self.finished[rows[running & ~still]] = True
        self._running = still
        n_running = int(still.sum())
        if n_running == 0:
            return True
        if len(rows) - n_running >= max(1, COMPACT_FRACTION * len(rows)):
            keep = still.nonzero().squeeze(-1)
            self._rows, tok, self._running = rows[keep], tok[keep], still[keep]
            self._cache, self._cos, self._sin = self._cache[:, :, keep], self._cos[keep], self._sin[keep]
            self._key_bias = self._key_bias[keep]
        pos = self.p + step
        self._logits = decoder_forward(
            self._w,
            tok.unsqueeze(-1),
            self._cos[:, :, pos : pos + 1],
            self._sin[:, :, pos : pos + 1],
            self._cache,
            pos,
            self._key_bias[:, None, None, : pos + 1],
        )
        return False

    def _move_state(self, device: torch.device) -> None:
        if self.responses.device == device:
            return
        for name in (
            "input_ids",
            "attention_mask",
            "all_pos",
            "responses",
            "response_mask",
            "log_probs",
            "segments",
            "finished",
        ):
            setattr(self, name, getattr(self, name).to(device))

    def _release(self) -> None:
        self._w = self._cache = self._logits = self._cos = self._sin = self._key_bias = self._rows = None
        stack, self._stack = self._stack, None
        stack.close()


__all__ = ["ResumableGeneration"]
