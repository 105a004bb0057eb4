"""The ``megatron`` training engine: Megatron-Core GPT with tensor, pipeline and data parallelism.

Built like every engine (:func:`verl.workers.engine.build_engine`), with ``engine_config`` the
``megatron`` section (``actor_rollout_ref.actor.megatron``, ``.ref.megatron``, ``critic.megatron``;
upstream's keys). The HF checkpoint at ``model.path`` is loaded into Megatron's layout
(:mod:`.weights`), the model runs through Megatron's pipeline schedules (:mod:`.schedule`) and trains
with Megatron's DDP and optimizer (``use_distributed_optimizer`` shards the optimizer state over the
data-parallel ranks). On CPU, :mod:`.cpu` is entered around every Megatron call.

Each process holds one tensor/pipeline shard; the data-parallel group (``dp_group``) is the set of
processes that hold the same shard. Outputs (log-probs, values) are computed on the last pipeline
stage and broadcast to the other stages, so every rank returns them; metrics likewise.

Not on this path (refused with the key to change): ``context_parallel_size > 1`` and
``expert_model_parallel_size > 1`` (need Transformer Engine attention / MoE models), the
``*_offload`` flags, ``model.use_remove_padding`` (Megatron's THD packing needs Transformer Engine)
and ``model.use_fused_kernels``; bf16/fp16 parameters on CPU.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist
from verl.workers.engine.base import BaseEngine, Batch, LossFn, ModelType, register_engine
from verl.workers.engine.megatron.cpu import device_support, seed_rng
from verl.workers.engine.megatron.optim import LRSchedule, build_optimizer, optimizer_step
from verl.workers.engine.megatron.parallel import init_parallel_state, parallel_sizes, rank_info
from verl.workers.engine.precision import resolve_dtype


def _require_megatron() -> None:
    try:
        import megatron.core  # noqa: F401
    except ImportError as e:
        raise ImportError(
            "strategy=megatron needs Megatron-Core: install verl-workers[megatron] (megatron-core 0.16.1)"
        ) from e


def _device() -> torch.device:
    if not dist.is_initialized():
        raise RuntimeError(
            "torch.distributed is not initialised: call dist.init_process_group('gloo' on CPU, 'nccl' on "
            "GPU) in every worker before building a training engine"
        )
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def check_engine_flags(model_config: Any, engine_config: Any, device: torch.device, dtype: torch.dtype) -> None:
    """Refuse what this engine does not do, naming the key (see module doc)."""
    if int(engine_config.context_parallel_size) > 1:
        raise NotImplementedError(
            f"megatron.context_parallel_size={engine_config.context_parallel_size}: context parallelism needs "
            "Transformer Engine attention, which this engine does not use; set it to 1"
        )
    if int(engine_config.expert_model_parallel_size) > 1:
        raise NotImplementedError(
            f"megatron.expert_model_parallel_size={engine_config.expert_model_parallel_size}: the Qwen2/Llama "
            "mapping is for dense models (no experts); set it to 1"
        )
    on = [k for k in ("param_offload", "grad_offload", "optimizer_offload") if bool(engine_config[k])]
    if on:
        if device.type == "cpu":
            raise ValueError(
                f"megatron.{', megatron.'.join(on)}=True means nothing on CPU (parameters, gradients and "
                f"optimizer state already live in host memory); set {'/'.join(on)}=False"
            )
        raise NotImplementedError(f"megatron.{'/'.join(on)}=True: offloading is not implemented for strategy=megatron")
    if "use_remove_padding" in model_config and bool(model_config.use_remove_padding):
        raise NotImplementedError(
            "model.use_remove_padding=True packs sequences in Megatron's THD layout, which needs Transformer "
            "Engine; strategy=megatron trims each micro-batch to its longest row instead: set it to False"
        )
    if "use_fused_kernels" in model_config and bool(model_config.use_fused_kernels):
        raise NotImplementedError("model.use_fused_kernels=True is not supported by strategy=megatron; set it to False")
    if device.type == "cpu" and dtype != torch.float32:
        raise NotImplementedError(
            f"model.model_dtype={model_config.model_dtype}: Megatron's mixed precision (bf16/fp16 parameters "
            "with fp32 main weights) is a GPU path; on CPU use model_dtype=float32"
        )


@register_engine("megatron")
class MegatronEngine(BaseEngine):
    """See the module doc. ``self.module`` is a ``ModuleList`` of this rank's model chunks (Megatron
    layout: a rollout needs an HF copy, see :meth:`full_state_dict`)."""

    def __init__(
        self,
        *,
        model_config: Any,
        engine_config: Any,
        optim_config: Any = None,
        model_type: ModelType = "causal_lm",
        grad_clip: float | None = 1.0,
        total_training_steps: int | None = None,
        checkpoint_config: Any = None,
    ):
        _require_megatron()
        self.device = _device()
        self.dtype = resolve_dtype(model_config.model_dtype)
        check_engine_flags(model_config, engine_config, self.device, self.dtype)
        if model_type not in ("causal_lm", "value"):
            raise ValueError(f"unknown model_type {model_type!r}; known: causal_lm, value")
        self.model_config = model_config
        self.engine_config = engine_config
        self.optim_config = optim_config
        self.model_type = model_type
        self.grad_clip = grad_clip
        self.total_training_steps = total_training_steps
        self.checkpoint_config = checkpoint_config
        self.sizes = parallel_sizes(engine_config, dist.get_world_size())
        self._grads_pending = False
        with device_support(self.device):
            self._build()

    # ------------------------------------------------------------------ setup
    def _build(self) -> None:
        from megatron.core import parallel_state as mpu
        from megatron.core.transformer.transformer_layer import get_transformer_layer_offset
        from transformers import AutoConfig
        from verl.workers.engine.megatron.model import build_model_chunks, model_shape, transformer_config
        from verl.workers.engine.megatron.weights import HFCheckpoint, load_hf_into_chunk

        init_parallel_state(self.sizes)
        seed = int(self.engine_config.seed)
        seed_rng(seed, self.device)
        mc = self.model_config
        if mc.path is None:
            raise ValueError("model.path is not set; give a local Hugging Face model folder")
        from verl.workers.engine.hf_model import import_external_lib

        import_external_lib(mc)
        hf_config = AutoConfig.from_pretrained(mc.path, trust_remote_code=bool(mc.trust_remote_code))
        for key, value in dict(mc.override_config or {}).items():
            setattr(hf_config, key, value)
        self.hf_config = hf_config
        self.shape = model_shape(hf_config, self.sizes.tp)
        overrides = dict(self.engine_config.override_transformer_config or {})
        if bool(mc.enable_gradient_checkpointing):
            # Megatron's activation recompute, as upstream maps it: every layer recomputed in backward
            overrides = {"recompute_granularity": "full", "recompute_method": "uniform",
                         "recompute_num_layers": 1, **overrides}
        self.tf_config = transformer_config(
            hf_config, self.shape, parallel=self.sizes, dtype=self.dtype, device=self.device, overrides=overrides
        )
        chunks = build_model_chunks(hf_config, self.shape, self.tf_config, self.model_type, self.sizes.vpp)
        self.layer_offsets = [
            get_transformer_layer_offset(self.tf_config, vp_stage=(i if self.sizes.vpp else None))
            for i in range(len(chunks))
        ]
        ckpt = HFCheckpoint(mc.path)
        tp_rank = mpu.get_tensor_model_parallel_rank()
        for chunk, offset in zip(chunks, self.layer_offsets):
            load_hf_into_chunk(chunk, ckpt, self.shape, self.model_type, layer_offset=offset, tp_rank=tp_rank,
                               tp_size=self.sizes.tp, init_missing_head=seed)
            chunk.to(self.device)
        self.chunks = chunks  # unwrapped GPTModels: parameter names for the HF mapping and checkpoints
        self.module = torch.nn.ModuleList(chunks)
        self.rank = rank_info()
        self.optimizer = self.lr_scheduler = None
        self._ddp_chunks = None
        # bf16/fp16 parameters (GPU): Megatron's Float16Module casts inputs and outputs, inside DDP
        run_chunks = chunks
        if self.dtype != torch.float32:
            from megatron.core.transformer.module import Float16Module

            run_chunks = [Float16Module(self.tf_config, c) for c in chunks]
        if self.optim_config is not None:
            self._ddp_chunks, self.optimizer = build_optimizer(
                run_chunks, self.tf_config, self.optim_config, self.engine_config, self.grad_clip
            )
            self.lr_scheduler = LRSchedule(self.optimizer, self.optim_config, self.total_training_steps)
            run_chunks = self._ddp_chunks
        self._run_chunks = run_chunks

    @property
    def dp_rank(self) -> int:
        return self.rank.dp_rank

    @property
    def dp_size(self) -> int:
        return self.sizes.dp

    @property
    def dp_group(self):
        from megatron.core import parallel_state as mpu

        return mpu.get_data_parallel_group()

    @property
    def is_collect_rank(self) -> bool:
        """The rank whose outputs the single controller collects: TP rank 0 on the last PP stage."""
        return self.rank.tp_rank == 0 and self.rank.pp_rank == self.rank.pp_size - 1 and self.rank.cp_rank == 0

    # ------------------------------------------------------------------ compute
    def _output_spec(self, temperature: float, calculate_entropy: bool, entropy_grad: bool):
        from megatron.core import parallel_state as mpu
        from verl.workers.engine.megatron.schedule import OutputSpec

        per_rank = self.shape.padded_vocab_size // self.sizes.tp
        return OutputSpec(
            model_type=self.model_type, temperature=float(temperature), calculate_entropy=calculate_entropy,
            entropy_grad=entropy_grad, vocab_start=self.rank.tp_rank * per_rank, vocab_size=self.shape.vocab_size,
            tp_group=mpu.get_tensor_model_parallel_group(),
        )

    def _prepare(self, micro_batches: Sequence[Batch]) -> list:
        from verl.workers.engine.megatron.schedule import prepare_micro_batch

        if not micro_batches:
            raise ValueError("no micro-batches to run")
        multiple = self.sizes.tp if self.sizes.sequence_parallel else 1
        return [prepare_micro_batch(mb, self.device, multiple) for mb in micro_batches]

    def forward_micro_batch(
        self, micro_batch: Batch, *, temperature: float = 1.0, calculate_entropy: bool = False,
        entropy_grad: bool = True,
    ) -> dict[str, torch.Tensor]:
        if torch.is_grad_enabled():
            raise NotImplementedError(
                "MegatronEngine runs forwards with gradients through the pipeline schedule only: use "
                "forward_backward (or call forward_micro_batch under torch.no_grad())"
            )
        return self.infer([micro_batch], temperature=temperature, calculate_entropy=calculate_entropy)

    def infer(
        self, micro_batches: Sequence[Batch], *, temperature: float = 1.0, calculate_entropy: bool = False
    ) -> dict[str, torch.Tensor]:
        from verl.workers.engine.megatron.schedule import broadcast_from_last_stage, run_schedule

        prepared = self._prepare(micro_batches)
        spec = self._output_spec(temperature, calculate_entropy, entropy_grad=False)
        with device_support(self.device), torch.no_grad():
            for chunk in self._run_chunks:
                chunk.eval()
            results = run_schedule(self._run_chunks, prepared, spec, forward_only=True)
        keys = ["values"] if self.model_type == "value" else ["log_probs"] + (["entropys"] if calculate_entropy else [])
        rows = sum(int(mb["responses"].shape[0]) for mb in micro_batches)
        n_resp = int(micro_batches[0]["responses"].shape[1])
        local = {k: torch.cat([r["outputs"][k] for r in results]) for k in keys} if results else {}
        with device_support(self.device):
            return broadcast_from_last_stage(local, {k: (rows, n_resp) for k in keys}, self.device)

    def forward_backward(
        self,
        micro_batches: Sequence[Batch],
        loss_fn: LossFn,
        *,
        temperature: float = 1.0,
        calculate_entropy: bool = False,
        entropy_grad: bool = True,
    ) -> list[dict[str, Any]]:
        from verl.workers.engine.megatron.schedule import broadcast_objects_from_last_stage, run_schedule

        if self.optimizer is None:
            raise RuntimeError("this engine was built without optim_config (inference only); cannot train it")
        if self._grads_pending:
            # Megatron reduces gradients over the data-parallel group at the end of each schedule run;
            # a second run before the step would reduce the first run's gradients twice
            raise RuntimeError("MegatronEngine.forward_backward takes a whole mini-batch: call optimizer_step before the next one")
        prepared = self._prepare(micro_batches)
        spec = self._output_spec(temperature, calculate_entropy, entropy_grad)
        with device_support(self.device):
            for chunk in self._run_chunks:
                chunk.train()
            # loss_fn gives shares of a sum; the schedule divides by the micro-batch count and DDP
            # averages over data-parallel ranks: scale back by the latter here (the former in run_schedule)
            metrics = run_schedule(self._run_chunks, prepared, spec, forward_only=False, loss_fn=loss_fn,
                                   loss_scale=float(self.sizes.dp))
            self._grads_pending = True
            return broadcast_objects_from_last_stage(list(metrics))

    def optimizer_step(self) -> float:
        if self.optimizer is None:
            raise RuntimeError("this engine was built without optim_config (inference only); cannot step")
        with device_support(self.device):
            grad_norm = optimizer_step(self.optimizer, self._ddp_chunks, self.grad_clip)
        self._grads_pending = False
        if not math.isfinite(grad_norm):
            warnings.warn(f"gradient norm is {grad_norm}: optimizer step skipped", stacklevel=2)
        return grad_norm

    def lr_scheduler_step(self) -> float:
        if self.lr_scheduler is None:
            raise RuntimeError("this engine was built without optim_config (inference only); no LR schedule")
        self.lr_scheduler.step()
        return self.get_lr()

    def get_lr(self) -> float:
        if self.optimizer is None:
            raise RuntimeError("this engine was built without optim_config (inference only); no LR")
        return float(self.optimizer.param_groups[0]["lr"])

    # ------------------------------------------------------------------ state
    def full_state_dict(self) -> dict[str, torch.Tensor]:
        """Every parameter under its HF name, full, on every rank (collective): what the rollout's HF
        copy loads and what HF export writes."""
        from verl.workers.engine.megatron.weights import gather_hf_state_dict

        with device_support(self.device):
            return dict(gather_hf_state_dict(self.chunks, self.layer_offsets, self.shape, self.model_type))

    def save_checkpoint(self, path: str, global_step: int = 0) -> None:
        from verl.workers.engine.megatron.checkpoint import save_megatron_checkpoint

        with device_support(self.device):
            save_megatron_checkpoint(self, path, global_step=global_step)

    def load_checkpoint(self, path: str) -> None:
        from verl.workers.engine.megatron.checkpoint import load_megatron_checkpoint

        with device_support(self.device):
            load_megatron_checkpoint(self, path)
