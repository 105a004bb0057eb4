"""The base class of every SPMD worker.

A worker learns its place in the group from the torch.distributed rendezvous environment that the
worker group sets before the process starts: ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``LOCAL_WORLD_SIZE`` (Ray's groups also set upstream's ``RAY_LOCAL_WORLD_SIZE``), ``MASTER_ADDR``,
``MASTER_PORT``. Rank 0 picks the master address and a free
port when none is given, so ``torch.distributed.init_process_group(backend)`` with the default
``env://`` init works in every worker (gloo on CPU, nccl on GPU).
"""

from __future__ import annotations

import os
import socket
import sys

from verl.single_controller.base.decorator import Dispatch, register


def get_node_ip() -> str:
    """This node's address as the cluster sees it (Ray's view when Ray runs this process)."""
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        return ray.util.get_node_ip_address()
    return "127.0.0.1"


def get_free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return s.getsockname()[1]


class Worker:
    """Base class for workers run by a ``WorkerGroup``.

    Subclasses call ``super().__init__()`` first, then may call
    ``torch.distributed.init_process_group(backend="gloo" | "nccl")``.
    """

    #: where a role worker inside a fused worker finds its sibling roles (``{role: worker}``)
    fused_worker_attr_name = "fused_worker_dict"

    def __init__(self, cuda_visible_devices: str | None = None):
        env = os.environ
        self._rank = int(env.get("RANK", 0))
        self._world_size = int(env.get("WORLD_SIZE", 1))
        self._local_rank = int(env.get("LOCAL_RANK", 0))
        self._local_world_size = int(env.get("LOCAL_WORLD_SIZE", env.get("RAY_LOCAL_WORLD_SIZE", 1)))
        if self._rank == 0 and not env.get("MASTER_ADDR"):
            # Rank 0 hosts the rendezvous; the group hands this address to the other ranks.
            env["MASTER_ADDR"] = get_node_ip()
            env["MASTER_PORT"] = str(get_free_port())
        for key, value in (
            ("RANK", self._rank),
            ("WORLD_SIZE", self._world_size),
            ("LOCAL_RANK", self._local_rank),
        ):
            env.setdefault(key, str(value))
        self._master_addr = env.get("MASTER_ADDR")
        self._master_port = env.get("MASTER_PORT")
        self._cuda_visible_devices = cuda_visible_devices or env.get("CUDA_VISIBLE_DEVICES")
        # mesh name -> this worker's data-parallel rank / whether its output is collected
        self._dispatch_dp_rank: dict[str, int] = {}
        self._collect_dp_rank: dict[str, bool] = {}
        # filled by a fused worker (``create_colocated_worker_raw_cls``) with every role in this process
        self.fused_worker_dict: dict[str, Worker] = {}
        if env.get("VERL_WORKER_NUM_CPUS"):
            # Set by RayWorkerGroup: as many torch threads as the CPUs this worker reserved, decided
            # here, where the worker starts (an OMP_NUM_THREADS the user gave the workers wins).
            from verl.utils.cpu_threads import apply_worker_threads

            apply_worker_threads(float(env["VERL_WORKER_NUM_CPUS"]))
        if env.get("VERL_RAY_TENSOR_TRANSPORT") == "1":
            # Set by RayWorkerGroup: send results back through Ray's object store without extra copies.
            from verl.utils.ray_transport import install_tensor_transport

            install_tensor_transport()

    @property
    def rank(self) -> int:
        return self._rank

    @property
    def world_size(self) -> int:
        return self._world_size

    @property
    def local_rank(self) -> int:
        return self._local_rank

    def get_master_addr_port(self) -> tuple[str | None, str | None]:
        """The torch.distributed rendezvous address and port of this group."""
        return self._master_addr, self._master_port

    def get_fused_worker_by_name(self, worker_name: str) -> Worker | None:
        """The role worker ``worker_name`` sharing this process (fused workers), else None."""
        return self.fused_worker_dict.get(worker_name)

    def get_cuda_visible_devices(self) -> str | None:
        return self._cuda_visible_devices

    def _get_worker_info(self) -> dict:
        """Process facts the group keeps for error messages (which worker died, where)."""
        return {"pid": os.getpid(), "node_ip": get_node_ip(), "rank": self._rank}

    def _register_dispatch_collect_info(self, mesh_name: str, dp_rank: int, is_collect: bool) -> None:
        """Declare this worker's data-parallel rank in ``mesh_name`` and whether its output is collected.

        Used by ``make_nd_compute_dataproto_dispatch_fn(mesh_name)``: e.g. with tensor parallelism 2,
        ranks 0,1 share dp rank 0 and only the first of them is collected.
        """
        if mesh_name in self._dispatch_dp_rank:
            raise ValueError(f"worker rank {self._rank} already registered mesh {mesh_name!r}")
        if not isinstance(dp_rank, int) or dp_rank < 0:
            raise ValueError(f"dp_rank must be a non-negative int, got {dp_rank!r} for mesh {mesh_name!r}")
        self._dispatch_dp_rank[mesh_name] = dp_rank
        self._collect_dp_rank[mesh_name] = bool(is_collect)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def _query_dispatch_info(self, mesh_name: str) -> int | None:
        return self._dispatch_dp_rank.get(mesh_name)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def _query_collect_info(self, mesh_name: str) -> bool | None:
        return self._collect_dp_rank.get(mesh_name)
