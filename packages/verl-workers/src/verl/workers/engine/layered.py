"""``actor_rollout_ref.rollout.layered_summon``: gather the weights for the rollout one decoder layer at a
time (upstream's LoRA option of the same name).

The plain path (``FSDPEngine.hf_state_dict``) all-gathers the whole model on every rank, merges LoRA in,
then hands the dict to the weight sync: the peak is a full unsharded copy of the model per rank. Here each
decoder layer's tensors are gathered, LoRA-merged (``LoraLayout.merge`` on that layer's own keys: a layer
holds its adapters) and yielded before the next layer is gathered, so the weight sync, which consumes the
stream in buckets, holds about one layer (plus one bucket) at a time. The result is the same set of
tensors as ``hf_state_dict()``, in layer order.

Implemented for the ``fsdp2`` engine (parameters are DTensors, each gathered with ``full_tensor()``, a
collective every rank makes in the same order) and its one-rank plain module. The ``fsdp`` (FSDP1) engine
gathers through ``state_dict()`` hooks that unshard the whole model, so it refuses the option.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch


def _gathered(value: torch.Tensor) -> torch.Tensor:
    from torch.distributed.tensor import DTensor

    full = value.full_tensor() if isinstance(value, DTensor) else value
    # clone: on one CPU rank the tensor is the live parameter itself
    return full.detach().cpu().clone()


def layer_groups(module: torch.nn.Module, layer_names: set[str]) -> list[tuple[str, ...]]:
    """The module's state-dict keys grouped by decoder layer (model order), then the rest (embeddings,
    final norm, LM head) as the last group. ``layer_names``: the model's ``_no_split_modules``; matched
    along each module's class hierarchy, since fully_shard swaps a layer's class for ``FSDP<Layer>``."""
    prefixes = [
        f"{name}."
        for name, m in module.named_modules()
        if any(c.__name__ in layer_names for c in type(m).__mro__)
    ]
    groups: dict[str, list[str]] = {p: [] for p in prefixes}
    rest: list[str] = []
    for key in module.state_dict(keep_vars=True):
        owner = next((p for p in prefixes if key.startswith(p)), None)
        (groups[owner] if owner is not None else rest).append(key)
    return [tuple(keys) for keys in groups.values() if keys] + ([tuple(rest)] if rest else [])


def iter_layered_hf_state(engine) -> Iterator[tuple[str, torch.Tensor]]:
    """(HF name, tensor) pairs of ``engine``'s weights, LoRA merged, gathered one layer at a time
    (collective: every rank iterates to the end)."""
    from verl.workers.engine.fsdp import FSDP2Engine

    if not isinstance(engine, FSDP2Engine):
        raise NotImplementedError(
            f"actor_rollout_ref.rollout.layered_summon=True is implemented for the fsdp2 engine; this actor runs "
            f"{type(engine).__name__}. Set actor_rollout_ref.actor.strategy=fsdp2 or layered_summon=False"
        )
    module = engine.module
    live = module.state_dict(keep_vars=True)  # FSDP2: sharded DTensors, nothing gathered yet
    # a PeftModel answers _no_split_modules from the HF model it wraps
    layer_names = set(module._no_split_modules or [])
    if not layer_names:
        raise ValueError(f"{type(module).__name__} names no decoder layer class in _no_split_modules")
    for keys in layer_groups(module, layer_names):
        group = {k: _gathered(live[k]) for k in keys}
        yield from (group if engine.lora is None else engine.lora.merge(group)).items()
        del group
