"""Helpers for tests of verl-workers and packages that build on it (no pytest dependency).

``make_rl_batch`` builds a ``DataProto`` shaped like a rollout output (docs/contracts.md);
``left_pad`` / ``random_left_padded`` / ``chat_prompt_batch`` build prompts as the RL dataset gives
them (left-padded); ``run_gloo`` runs a function on N spawned CPU processes joined in one gloo group.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import torch


def make_rl_batch(n: int = 8, prompt_len: int = 6, response_len: int = 5, vocab: int = 101, seed: int = 0,
                  pad_id: int = 0):
    """Rows with random prompt/response lengths: ``prompts`` left-padded, ``responses`` right-padded,
    ``input_ids``, ``attention_mask``, ``position_ids``, ``response_mask``, and random
    ``old_log_probs``, ``ref_log_prob``, ``advantages``, ``values``, ``returns`` ([N, R])."""
    from verl import DataProto

    g = torch.Generator().manual_seed(seed)
    prompts = torch.full((n, prompt_len), pad_id, dtype=torch.long)
    responses = torch.full((n, response_len), pad_id, dtype=torch.long)
    p_mask = torch.zeros(n, prompt_len, dtype=torch.long)
    r_mask = torch.zeros(n, response_len, dtype=torch.long)
    for i in range(n):
        lp = int(torch.randint(1, prompt_len + 1, (1,), generator=g))
        lr = int(torch.randint(1, response_len + 1, (1,), generator=g))
        prompts[i, prompt_len - lp:] = torch.randint(5, vocab, (lp,), generator=g)
        responses[i, :lr] = torch.randint(5, vocab, (lr,), generator=g)
        p_mask[i, prompt_len - lp:] = 1
        r_mask[i, :lr] = 1
    attention_mask = torch.cat([p_mask, r_mask], dim=1)
    position_ids = (attention_mask.cumsum(dim=1) - 1).clamp(min=0)
    shape = (n, response_len)
    batch = {
        "prompts": prompts, "responses": responses, "input_ids": torch.cat([prompts, responses], dim=1),
        "attention_mask": attention_mask, "position_ids": position_ids, "response_mask": r_mask,
        "old_log_probs": -torch.rand(shape, generator=g) * 3 - 2,
        "ref_log_prob": -torch.rand(shape, generator=g) * 3 - 2,
        "advantages": torch.randn(shape, generator=g),
        "values": torch.randn(shape, generator=g),
        "returns": torch.randn(shape, generator=g),
    }
    return DataProto.from_dict(tensors=batch, meta_info={"temperature": 1.0})


def left_pad(rows: list[list[int]], pad_id: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``input_ids``, ``attention_mask``, ``position_ids`` [B, longest row] of left-padded ``rows``."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, r in enumerate(rows):
        if len(r):
            ids[i, width - len(r):] = torch.as_tensor(r, dtype=torch.long)
            mask[i, width - len(r):] = 1
    return ids, mask, (mask.cumsum(-1) - 1).clamp(min=0)


def random_left_padded(lengths: list[int], vocab: int, seed: int = 0, pad_id: int = 0):
    """``left_pad`` of random token rows of the given lengths (ids 2..vocab-1: never pad 0 or EOS 1)."""
    g = torch.Generator().manual_seed(seed)
    return left_pad([torch.randint(2, vocab, (n,), generator=g) for n in lengths], pad_id)


def chat_prompt_batch(tokenizer, texts: list[str], meta: dict | None = None, *, n: int = 1):
    """One user turn per text through the chat template with the generation prompt, left-padded, as a
    ``DataProto`` (meta_info ``meta``), repeated ``n`` times (interleaved) as the trainer does."""
    from verl import DataProto

    encoded = [
        tokenizer.apply_chat_template(
            [{"role": "user", "content": t}], add_generation_prompt=True, tokenize=True, return_dict=False
        )
        for t in texts
    ]
    ids, mask, pos = left_pad(encoded, tokenizer.pad_token_id)
    data = DataProto.from_dict(
        tensors={"input_ids": ids, "attention_mask": mask, "position_ids": pos}, meta_info=dict(meta or {})
    )
    return data.repeat(n, interleave=True) if n > 1 else data


def _gloo_entry(rank: int, payload: bytes, world_size: int, store: str) -> None:
    import cloudpickle
    import torch.distributed as dist

    fn, args = cloudpickle.loads(payload)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world_size)
    try:
        fn(rank, world_size, *args)
    finally:
        dist.destroy_process_group()


def run_gloo(fn: Callable[..., Any], world_size: int, workdir: str, *args: Any) -> None:
    """Run ``fn(rank, world_size, *args)`` in ``world_size`` fresh (spawned) processes sharing a gloo
    group (rendezvous through a file in ``workdir``). ``fn`` may live in a test module: it is sent by
    value with cloudpickle. Raises if any process fails; results travel through files."""
    import sys

    import cloudpickle
    import torch.multiprocessing as mp

    module = sys.modules.get(fn.__module__)
    if module is not None and fn.__module__ != "__main__":
        cloudpickle.register_pickle_by_value(module)
    payload = cloudpickle.dumps((fn, args))
    store = os.path.join(workdir, f"gloo_store_{os.getpid()}")
    if os.path.exists(store):
        os.remove(store)
    mp.start_processes(_gloo_entry, args=(payload, world_size, store), nprocs=world_size, join=True,
                       start_method="spawn")


def actor_engine(arr: Any, total_training_steps: int = 2, strategy: str = "fsdp2", **options: Any):
    """The actor's training engine for an ``actor_rollout_ref`` config section (its model, FSDP and optimizer
    settings), as the actor worker builds it; ``options`` go to ``build_engine`` (``grad_clip``,
    ``ulysses_sequence_parallel_size``, kernel options, ...)."""
    from verl.workers.engine import build_engine

    return build_engine(
        strategy,
        model_config=arr.model,
        engine_config=arr.actor.fsdp_config,
        optim_config=arr.actor.optim,
        total_training_steps=total_training_steps,
        **options,
    )
