"""What every training role's worker shares, FSDP's and Megatron's alike: joining the worker group's
torch.distributed group and seeding, per-rank batch sizes, the engine options a role section asks for, the
Ulysses dispatch mesh, meta-info views of a batch and the pruning of old checkpoint folders.
"""

from __future__ import annotations

import os
import shutil
from typing import Any

import torch
import torch.distributed as dist
from verl import DataProto
from verl.single_controller.base.worker import Worker

ROLES = ("actor_rollout_ref", "actor_rollout", "actor", "rollout", "ref")
# Weight-sync bucket size for rollout engines that hold their own weights (rollout.engine_kwargs key).
_BUCKET_MB_KEY = "update_weights_bucket_megabytes"


def init_distributed(device: str | None = None, seed: int | None = None) -> torch.device:
    """Select this worker's device, join the worker group's torch.distributed group (env:// from the
    Worker; gloo on CPU, NCCL on GPU) and seed Python, NumPy and torch with ``seed + rank``.

    ``device``: ``cpu``, ``cuda`` or None/``auto`` (what this process sees). Joining is skipped when
    already done (several roles colocated in one process share the group). Returns the device.
    """
    from verl.utils.device import get_nccl_backend, seed_everything, set_worker_device

    dev = set_worker_device(device)  # under Ray: the GPU Ray gave this actor, not cuda:LOCAL_RANK
    if not dist.is_initialized():
        dist.init_process_group(backend=get_nccl_backend(dev.type))
    if seed is not None:
        seed_everything(int(seed) + dist.get_rank())
    return dev


def per_rank_size(total_prompts: int, n: int, dp_size: int, what: str) -> int:
    """``total_prompts * n // dp_size``, or an error in the user's terms when it does not divide."""
    trajectories = int(total_prompts) * int(n)
    if trajectories % dp_size:
        raise ValueError(
            f"{what}={total_prompts} prompts x rollout.n={n} = {trajectories} trajectories is not divisible "
            f"by {dp_size} workers"
        )
    return trajectories // dp_size


def _sp_size(section: Any) -> int:
    if section is None or "ulysses_sequence_parallel_size" not in section:
        return 1
    return int(section.ulysses_sequence_parallel_size)


def _engine_options(
    section: Any, use_torch_compile: bool | None = False, entropy_checkpointing: bool = False,
    run_tokens: int | None = None,
) -> dict[str, Any]:
    """Engine keywords beyond the common ones, given only when set (engines without them refuse them).
    ``use_torch_compile`` reaches the FSDP engines whatever its value (``None`` is their own decision,
    sized by ``run_tokens``); other engines get it only when true (and refuse it)."""
    options: dict[str, Any] = {}
    if _sp_size(section) != 1:
        options["ulysses_sequence_parallel_size"] = _sp_size(section)
    if section.get("strategy") in ("fsdp", "fsdp2") and use_torch_compile is not False:
        options["use_torch_compile"] = use_torch_compile
        options["run_tokens"] = run_tokens
    elif use_torch_compile:
        options["use_torch_compile"] = True
    if entropy_checkpointing:
        options["entropy_checkpointing"] = True
    return options


def _register_sp_mesh(worker: Worker, mesh_name: str, sp: int) -> None:
    """Ranks ``d*sp .. d*sp+sp-1`` share data-parallel rank d; the first of them is collected."""
    if sp < 1 or worker.world_size % sp:
        raise ValueError(
            f"{mesh_name}: ulysses_sequence_parallel_size={sp} must divide the number of workers ({worker.world_size})"
        )
    worker._register_dispatch_collect_info(mesh_name, dp_rank=worker.rank // sp, is_collect=worker.rank % sp == 0)


def _with_meta(data: DataProto, **meta: Any) -> DataProto:
    """A view of ``data`` with extra meta_info (the caller's object is left untouched)."""
    return DataProto(
        batch=data.batch, non_tensor_batch=data.non_tensor_batch, meta_info={**data.meta_info, **meta}
    )


class _CheckpointKeeper:
    """Remembers where a worker saved and deletes the oldest folders beyond ``max_ckpt_to_keep``."""

    def __init__(self) -> None:
        self.saved: list[str] = []

    def saved_and_prune(self, path: str, max_keep: int | None) -> None:
        path = os.path.abspath(path)
        if path in self.saved:
            self.saved.remove(path)
        self.saved.append(path)
        if max_keep is None or max_keep <= 0:
            return
        while len(self.saved) > max_keep:
            old = self.saved.pop(0)
            if dist.get_rank() == 0 and os.path.isdir(old):
                shutil.rmtree(old)
