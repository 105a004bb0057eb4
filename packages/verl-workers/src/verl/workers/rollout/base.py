"""The rollout-engine seam: what a rollout engine is and how one is chosen.

A rollout engine turns a batch of left-padded prompts into a batch of trajectories (see
docs/contracts.md, "After generate_sequences"). Engines register under the name users put in
``actor_rollout_ref.rollout.name`` in ``verl.registries.ROLLOUT_ENGINES``.

Every engine is built the same way, ``cls(module=..., config=rollout_cfg, tokenizer=...)``, so the
worker does not special-case engines:

- engines that run the trainer's own module in-process (``hf``) keep a reference to ``module`` and
  see every optimizer step without any copy;
- engines that hold their own copy of the weights (``vllm``, ``sglang``, behind the extras of the
  same names) keep ``module`` only for its config and receive weights through
  :meth:`BaseRollout.load_weight_buckets` / :meth:`BaseRollout.update_weights`, which
  :mod:`verl.workers.rollout.weight_sync` feeds in buckets.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import torch
from verl.registries import ROLLOUT_ENGINES

if TYPE_CHECKING:
    from verl import DataProto
    from verl.workers.rollout.weight_sync import WeightBucket


class BaseRollout(ABC):
    """A rollout engine. Subclasses implement :meth:`generate_sequences`."""

    #: True when the engine reads the trainer's live module (no weight transfer needed).
    shares_trainer_weights: bool = False
    #: the torch generator sampling draws from (:func:`rollout_generator`); saved with the actor's
    #: checkpoint so a resumed run samples what an uninterrupted one would. None: the engine seeds its own.
    generator: torch.Generator | None = None

    @abstractmethod
    def generate_sequences(self, prompts: DataProto) -> DataProto:
        """Generate one response per row of ``prompts`` (the trainer has already repeated rows
        ``rollout.n`` times). Returns the tensors listed in docs/contracts.md."""

    def update_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Load new weights (name, full tensor) into the engine's own copy.

        Engines that share the trainer's module have nothing to do; engines with their own copy
        must override this.
        """
        if not self.shares_trainer_weights:
            raise NotImplementedError(
                f"{type(self).__name__} holds its own weights but does not implement update_weights"
            )

    def load_weight_buckets(self, buckets: Iterable[WeightBucket]) -> int:
        """Take a whole weight sync as buckets (see :mod:`verl.workers.rollout.weight_sync`); returns
        the number of tensors loaded.

        By default the buckets are reassembled here and handed to :meth:`update_weights` bucket by
        bucket; engines in another process (vLLM) override this to move the raw buckets instead.
        """
        from verl.workers.rollout.weight_sync import load_buckets_into

        return load_buckets_into(self.update_weights, buckets)

    def resume(self) -> None:
        """Re-acquire device memory before generation (no-op unless the engine offloads)."""
        return None

    def release(self) -> None:
        """Give device memory back to training after generation (no-op unless the engine offloads)."""
        return None


def generation_tensors(
    prompts: torch.Tensor,
    attention_mask: torch.Tensor,
    responses: torch.Tensor,
    response_mask: torch.Tensor,
    position_ids: torch.Tensor,
    rollout_log_probs: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """A generation's tensors as the contract names them (docs/contracts.md): the left-padded ``prompts``
    [B, P] with their ``attention_mask``, the right-padded ``responses`` [B, R] with ``response_mask``,
    ``input_ids`` / ``attention_mask`` of prompt and response side by side, ``position_ids`` over both
    ([B, P + R], or M-RoPE's [B, 3, P + R]) and, when given, ``rollout_log_probs`` [B, R]."""
    out = {
        "prompts": prompts,
        "responses": responses,
        "response_mask": response_mask,
        "input_ids": torch.cat([prompts, responses], dim=1),
        "attention_mask": torch.cat([attention_mask, response_mask], dim=1),
        "position_ids": position_ids,
    }
    if rollout_log_probs is not None:
        out["rollout_log_probs"] = rollout_log_probs
    return out


def rollout_generator(config: Any, rank: int, device: torch.device | str = "cpu") -> torch.Generator:
    """The generator a rollout worker samples with: ``rollout.seed + rank`` on ``device``.

    One per worker, made once and drawn from for the whole run, so two runs with the same config
    sample the same tokens and data-parallel ranks draw different ones. ``config`` is
    ``actor_rollout_ref.rollout``; ``rank`` the worker's data-parallel rank.
    """
    return torch.Generator(device=device).manual_seed(int(config.seed) + int(rank))


def register_rollout(name: str):
    """Class decorator: register a rollout engine under ``rollout.name == name``."""

    def deco(cls: type[BaseRollout]) -> type[BaseRollout]:
        if not issubclass(cls, BaseRollout):
            raise TypeError(f"rollout engine {name!r}: {cls.__qualname__} must subclass BaseRollout")
        ROLLOUT_ENGINES.register(name, cls)
        return cls

    return deco


def get_rollout_class(name: str) -> type[BaseRollout]:
    """The engine class for ``rollout.name`` (unknown names list the known ones)."""
    return ROLLOUT_ENGINES.get(name)


def build_rollout(name: str, **kwargs: Any) -> BaseRollout:
    """Construct the engine registered as ``name`` with ``module``, ``config``, ``tokenizer``."""
    return get_rollout_class(name)(**kwargs)
