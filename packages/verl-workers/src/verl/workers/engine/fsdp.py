"""FSDP training engines: ``fsdp2`` (``torch.distributed.fsdp.fully_shard``) and ``fsdp`` (FSDP1).

Both shard every decoder layer (the model's ``_no_split_modules``) and then the root over all ranks of
the default process group (``fsdp_config.fsdp_size`` < world size gives HSDP for ``fsdp2``: replicate
across groups of ``fsdp_size`` ranks). CPU + gloo and GPU + NCCL; the device follows the backend.

Flags (``fsdp_config``): ``param_offload`` / ``offload_policy`` keep parameters (and gradients) in host
memory between uses; ``optimizer_offload`` keeps optimizer state in host memory outside
``optimizer_step``. On CPU everything already lives in host memory, so these flags are rejected there
with an error rather than silently meaning nothing. ``reshard_after_forward`` as in FSDP2.
``model_dtype`` and ``mixed_precision.{param,reduce,buffer}_dtype``: fp32 master weights and a compute
copy, see :mod:`verl.workers.engine.precision`.

Model options: ``model.use_fused_kernels`` (chunked LM head + log-prob/entropy, no [tokens, vocab]
logits: :mod:`verl.workers.engine.fused_logprob`), ``model.use_liger`` (Liger kernels, GPU only),
``use_torch_compile`` (``true``/``false``/``None``: the decoder layers and the log-prob/entropy functions
through ``torch.compile``, see :mod:`verl.workers.engine.compile`; ``run_tokens`` sizes the ``None`` decision)
and ``ulysses_sequence_parallel_size`` (``fsdp2`` only: :mod:`verl.workers.engine.ulysses`; ``dp_rank``,
``dp_size`` and ``dp_group`` are then those of the data-parallel dimension of the (dp, sp) mesh).

``fsdp2`` on a single CPU rank trains the unwrapped module (nothing to shard; see ``FSDP2Engine._wrap``);
mixed precision there runs through :class:`~verl.workers.engine.precision.ComputeCast`.
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.distributed as dist
from verl.workers.engine.base import BaseEngine, Batch, LossFn, ModelType, register_engine
from verl.workers.engine.compile import compile_layers, resolve_compile
from verl.workers.engine.hf_model import (
    HeadOptions,
    apply_liger,
    check_model_flags,
    freeze_vision_tower,
    fused_backend,
    install_fused_forward,
    load_hf_model,
    response_outputs,
    vision_inputs,
)
from verl.workers.engine.lora import ADAPTER_DIR, LoraLayout, apply_lora, broadcast_from_rank0, lora_enabled
from verl.workers.engine.optim import build_lr_scheduler, build_optimizer
from verl.workers.engine.precision import ComputeCast, cast_model, precision_from_config
from verl.workers.engine.ulysses import active_group


def _engine_device() -> torch.device:
    """The device the default group's backend computes on (the worker chose it: ``init_distributed``)."""
    from verl.utils.device import collective_device

    if not dist.is_initialized():
        raise RuntimeError(
            "torch.distributed is not initialised: call dist.init_process_group('gloo' on CPU, 'nccl' on "
            "GPU) in every worker before building a training engine"
        )
    return collective_device()


def _check_offload_flags(engine_config: Any, device: torch.device) -> None:
    if device.type != "cpu":
        return
    on = [k for k in ("param_offload", "optimizer_offload", "offload_policy") if bool(engine_config[k])]
    if on:
        raise ValueError(
            f"fsdp_config.{', fsdp_config.'.join(on)}=True means nothing on CPU (parameters and optimizer "
            f"state already live in host memory); set {'/'.join(on)}=False for a CPU run"
        )


def _layer_classes(model: torch.nn.Module) -> set[type]:
    names = set(model._no_split_modules or [])
    classes = {type(m) for m in model.modules() if type(m).__name__ in names}
    if not classes:
        raise ValueError(
            f"{type(model).__name__} names no decoder layer class in _no_split_modules ({sorted(names)}); "
            f"cannot decide what to shard"
        )
    return classes


class _FSDPEngineBase(BaseEngine):
    """What FSDP1 and FSDP2 share: loading, optimizer, micro-batch loops, checkpoints."""

    strategy = ""  # the registry name (actor.strategy)

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
        use_torch_compile: bool | None = False,
        run_tokens: int | None = None,
        entropy_checkpointing: bool = False,
        ulysses_sequence_parallel_size: int = 1,
        freeze_vision: bool = False,
    ):
        """``freeze_vision``: no gradient into a vision-language model's vision tower
        (``actor.freeze_vision_tower``). ``run_tokens``: the tokens the run will train on, which
        ``use_torch_compile=None`` weighs against the compile time."""
        self.device = _engine_device()
        _check_offload_flags(engine_config, self.device)
        check_model_flags(model_config, self.device)
        self.model_config = model_config
        #: pack real tokens for every forward (verl.workers.engine.packing); identical results
        self.remove_padding = "use_remove_padding" in model_config and bool(model_config.use_remove_padding)
        self.engine_config = engine_config
        self.optim_config = optim_config
        self.model_type = model_type
        self.grad_clip = grad_clip
        self.total_training_steps = total_training_steps
        self.checkpoint_config = checkpoint_config
        self._world = dist.get_world_size()
        self._rank = dist.get_rank()
        self.sp_size = int(ulysses_sequence_parallel_size)
        self.sp_group = self._dp_group = None
        if self.sp_size > 1:
            self._check_sp()
            from verl.workers.engine.ulysses import sp_mesh

            mesh = sp_mesh(self.sp_size, self.device.type)
            self.sp_group, self._dp_group = mesh["sp"].get_group(), mesh["dp"].get_group()
        #: the dtypes of this engine: fp32 masters when trained, compute in ``param_dtype``
        self.precision = precision_from_config(engine_config, trainable=optim_config is not None, device=self.device)
        model = cast_model(load_hf_model(model_config, model_type, self.precision.model_dtype), self.precision)
        n_params = sum(p.numel() for p in model.parameters())
        lora = model_type == "causal_lm" and lora_enabled(model_config)
        #: whether the decoder layers run compiled, and why (verl.workers.engine.compile.resolve_compile)
        self.compiled, self.compile_reason = resolve_compile(
            use_torch_compile, device_type=self.device.type, strategy=self.strategy, sp_size=self.sp_size,
            lora=lora, param_tokens=None if run_tokens is None else float(run_tokens) * n_params,
        )
        self._head = HeadOptions(
            fused=model_type == "causal_lm" and "use_fused_kernels" in model_config
            and bool(model_config.use_fused_kernels),
            compile=self.compiled, sp_group=self.sp_group,
            checkpoint_entropy=bool(entropy_checkpointing),
        )
        #: the compiled decoder layers (empty when not compiled)
        self.compiled_layers = compile_layers(model, tuple(_layer_classes(model))) if self.compiled else []
        if "use_liger" in model_config and bool(model_config.use_liger):
            apply_liger(model)
        if self._head.fused:
            install_fused_forward(model, fused_backend(model_config))
        if self.sp_size > 1:
            from verl.workers.engine.ulysses import install

            install(model, self.sp_size)
        if freeze_vision:
            freeze_vision_tower(model)
        self.hf_config = model.config
        #: where the LoRA adapters sit (None: no LoRA); see verl.workers.engine.lora
        self.lora: LoraLayout | None = None
        if lora:
            model = apply_lora(model, model_config)
            self.lora = LoraLayout.of(model)
            broadcast_from_rank0([p for p in model.parameters() if p.requires_grad], self.device)
        self._sync_new_params(model)
        self.module = self._wrap(model)
        if optim_config is not None:
            # frozen weights (LoRA's base model) get no optimizer state
            trainable = [p for p in self.module.parameters() if p.requires_grad]
            self.optimizer = build_optimizer(trainable, optim_config)
            self.lr_scheduler = build_lr_scheduler(self.optimizer, optim_config, total_training_steps)
        else:
            self.optimizer = None
            self.lr_scheduler = None
        self._optim_offloaded = False
        if self.optimizer is not None and bool(engine_config.optimizer_offload):
            self._offload_optimizer()

    # ------------------------------------------------------------------ setup
    def _sync_new_params(self, model: torch.nn.Module) -> None:
        # A value head loaded from a causal-LM checkpoint is freshly initialised, differently on every
        # rank; all ranks must start from rank 0's head.
        if self.model_type != "value" or self._world == 1:
            return
        for p in model.score.parameters():
            buf = p.data.to(self.device)
            dist.broadcast(buf, src=0)
            p.data.copy_(buf.to(p.device))

    def _wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        raise NotImplementedError

    def _check_sp(self) -> None:
        if not self.remove_padding:
            raise ValueError(
                f"ulysses_sequence_parallel_size={self.sp_size} splits packed sequences; set "
                "model.use_remove_padding=True"
            )

    @property
    def dp_rank(self) -> int:
        return self._rank // self.sp_size

    @property
    def dp_size(self) -> int:
        return self._world // self.sp_size

    @property
    def dp_group(self):
        return self._dp_group

    def _to_device(self, micro_batch: Batch) -> dict[str, torch.Tensor]:
        out = {k: micro_batch[k].to(self.device) for k in ("input_ids", "attention_mask", "position_ids", "responses")}
        if "teacher_ids" in micro_batch:  # on-policy distillation: the student's log-probs at these ids
            out["teacher_ids"] = micro_batch["teacher_ids"].to(self.device)
        if "multi_modal_inputs" in micro_batch:  # vision-language rows (see verl.workers.actor.dp_actor)
            out.update(vision_inputs(micro_batch["multi_modal_inputs"], self.device))
        return out

    # ------------------------------------------------------------------ compute
    def forward_micro_batch(
        self, micro_batch: Batch, *, temperature: float = 1.0, calculate_entropy: bool = False,
        entropy_grad: bool = True, topk: int = 0,
    ) -> dict[str, torch.Tensor]:
        inputs = self._to_device(micro_batch)
        return response_outputs(
            self.module, inputs, self.model_type,
            temperature=temperature, calculate_entropy=calculate_entropy, entropy_grad=entropy_grad,
            remove_padding=self.remove_padding, compute_dtype=self.precision.param_dtype, head=self._head,
            topk=topk, gather_ids=inputs.get("teacher_ids"),
        )

    def infer(
        self, micro_batches: Sequence[Batch], *, temperature: float = 1.0, calculate_entropy: bool = False,
        topk: int = 0,
    ) -> dict[str, torch.Tensor]:
        self.module.eval()
        outs: dict[str, list[torch.Tensor]] = {}
        with torch.no_grad():
            for mb in micro_batches:
                for k, v in self.forward_micro_batch(
                    mb, temperature=temperature, calculate_entropy=calculate_entropy, topk=topk
                ).items():
                    outs.setdefault(k, []).append(v.cpu())
        return {k: torch.cat(v, dim=0) for k, v in outs.items()}

    def forward_backward(
        self,
        micro_batches: Sequence[Batch],
        loss_fn: LossFn,
        *,
        temperature: float = 1.0,
        calculate_entropy: bool = False,
        entropy_grad: bool = True,
    ) -> list[dict[str, Any]]:
        if self.optimizer is None:
            raise RuntimeError("this engine was built without optim_config (inference only); cannot train it")
        self.module.train()
        all_metrics = []
        for mb in micro_batches:
            out = self.forward_micro_batch(
                mb, temperature=temperature, calculate_entropy=calculate_entropy, entropy_grad=entropy_grad
            )
            loss, metrics = loss_fn(out, mb)
            # FSDP averages gradients over ranks; loss_fn gives this rank's share of a sum, so scale back.
            # (With SP every rank of a group holds the same loss; the gradients of its copies through the
            # sequence slices sum to one loss's gradient, so the factor stays the world size.) The SP
            # group stays active for the recomputed forward of gradient checkpointing.
            with active_group(self.sp_group):
                (loss * self._world).backward()
            all_metrics.append({**metrics, "loss": float(loss.detach().item())})
        return all_metrics

    def _clip_grad_norm(self, max_norm: float) -> torch.Tensor:
        raise NotImplementedError

    def optimizer_step(self) -> float:
        if self.optimizer is None:
            raise RuntimeError("this engine was built without optim_config (inference only); cannot step")
        max_norm = float(self.grad_clip) if self.grad_clip is not None and self.grad_clip > 0 else math.inf
        grad_norm = float(self._clip_grad_norm(max_norm))
        if self._optim_offloaded:
            self._load_optimizer()
        if math.isfinite(grad_norm):
            self.optimizer.step()
        else:
            warnings.warn(f"gradient norm is {grad_norm}: optimizer step skipped", stacklevel=2)
        self.optimizer.zero_grad(set_to_none=True)
        if bool(self.engine_config.optimizer_offload):
            self._offload_optimizer()
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

    # ------------------------------------------------------------------ optimizer offload (GPU)
    @property
    def _params_on_host(self) -> bool:
        """FSDP's CPU offload is on: parameter shards (and the optimizer step) live in host memory."""
        return bool(self.engine_config.param_offload) or bool(self.engine_config.offload_policy)

    def _move_optimizer_state(self, device: torch.device) -> None:
        if self._params_on_host:
            # FSDP's CPU offload keeps the parameter shards, and so the optimizer step and its state, in
            # host memory already; moving the state to the GPU for the step would mix devices.
            return
        for state in self.optimizer.state.values():
            for k, v in state.items():
                if isinstance(v, torch.Tensor) and v.dim() > 0:
                    state[k] = v.to(device, non_blocking=True)

    def _offload_optimizer(self) -> None:
        self._move_optimizer_state(torch.device("cpu"))
        self._optim_offloaded = True

    def _load_optimizer(self) -> None:
        self._move_optimizer_state(self.device)
        self._optim_offloaded = False

    # ------------------------------------------------------------------ state
    def full_state_dict(self) -> dict[str, torch.Tensor]:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        sd = get_model_state_dict(self.module, options=StateDictOptions(full_state_dict=True))
        # clone: on one CPU rank the gathered tensors can alias the live parameters
        return {k: v.detach().cpu().clone() for k, v in sd.items()}

    def hf_state_dict(self) -> dict[str, torch.Tensor]:
        """The weights under the HF model's names, as a rollout or an HF export needs them (collective).

        With LoRA the adapters are merged into the gathered copies; the training module is left as it is."""
        full = self.full_state_dict()
        return full if self.lora is None else self.lora.merge(full)

    def load_full_state_dict(self, state_dict: Mapping[str, torch.Tensor]) -> None:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

        # every rank holds the full tensors: each keeps its own shard, no broadcast needed
        set_model_state_dict(self.module, dict(state_dict), options=StateDictOptions(full_state_dict=True))

    def save_checkpoint(self, path: str, global_step: int = 0) -> None:
        from verl.workers.checkpoint.dcp import save_engine_checkpoint

        if self._optim_offloaded:
            self._load_optimizer()
        save_engine_checkpoint(self, path, global_step=global_step)
        if self.lora is not None:
            self._save_adapter(os.path.join(path, ADAPTER_DIR))
        if bool(self.engine_config.optimizer_offload) and self.optimizer is not None:
            self._offload_optimizer()

    def _save_adapter(self, out_dir: str) -> None:
        """The adapter in peft's format next to the DCP shards (collective gather, rank 0 writes)."""
        from verl.workers.engine.lora import save_adapter, unwrap_peft

        state = self.full_state_dict()
        if self._rank == 0:
            save_adapter(unwrap_peft(self.module), state, out_dir)
        dist.barrier()

    def load_checkpoint(self, path: str) -> None:
        from verl.workers.checkpoint.dcp import load_engine_checkpoint

        if self._optim_offloaded:
            self._load_optimizer()
        load_engine_checkpoint(self, path)
        if bool(self.engine_config.optimizer_offload) and self.optimizer is not None:
            self._offload_optimizer()


@register_engine("fsdp2")
class FSDP2Engine(_FSDPEngineBase):
    """FSDP2 (``fully_shard``) engine. See the module doc."""

    strategy = "fsdp2"

    def _wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy, fully_shard

        if self._world == 1 and self.device.type == "cpu":
            # One CPU rank: sharding over a single rank saves nothing, but FSDP2 would still run its
            # unshard/reshard hooks around every layer and DTensor's Python dispatch on every optimizer
            # op, a real cost on small models. The plain module trains the same;
            # DCP checkpoints hold the same keys and reshard to and from any number of ranks. Mixed
            # precision: the casts FSDP2 would make, made by ComputeCast.
            if self.precision.casts_for_compute:
                ComputeCast(model, self.precision.param_dtype, units=self.compiled_layers)
            return model
        fsdp_size = int(self.engine_config.fsdp_size)
        if fsdp_size <= 0 or fsdp_size >= self._world:
            mesh = init_device_mesh(self.device.type, (self._world,), mesh_dim_names=("fsdp",))
        else:
            if self._world % fsdp_size:
                raise ValueError(
                    f"fsdp_config.fsdp_size={fsdp_size} must divide the number of workers ({self._world})"
                )
            mesh = init_device_mesh(
                self.device.type, (self._world // fsdp_size, fsdp_size), mesh_dim_names=("ddp", "fsdp")
            )
        offload = self._params_on_host
        kwargs = dict(
            mesh=mesh,
            reshard_after_forward=bool(self.engine_config.reshard_after_forward),
            offload_policy=CPUOffloadPolicy() if offload else OffloadPolicy(),
            mp_policy=MixedPrecisionPolicy(
                param_dtype=self.precision.param_dtype, reduce_dtype=self.precision.reduce_dtype
            ),
        )
        layer_classes = tuple(_layer_classes(model))
        for m in model.modules():
            if isinstance(m, layer_classes):
                fully_shard(m, **kwargs)
        fully_shard(model, **kwargs)
        return model

    def _clip_grad_norm(self, max_norm: float) -> torch.Tensor:
        from torch.distributed.tensor import DTensor

        norm = torch.nn.utils.clip_grad_norm_(self.module.parameters(), max_norm)
        return norm.full_tensor() if isinstance(norm, DTensor) else norm


@register_engine("fsdp")
class FSDPEngine(_FSDPEngineBase):
    """FSDP1 (``FullyShardedDataParallel``, ``use_orig_params=True``) engine. See the module doc."""

    strategy = "fsdp"

    def _check_sp(self) -> None:
        raise NotImplementedError(
            f"ulysses_sequence_parallel_size={self.sp_size} is implemented for strategy 'fsdp2'; use "
            "actor.strategy=fsdp2 (critic.strategy=fsdp2) or set the size to 1"
        )

    def _wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        import functools

        from torch.distributed.fsdp import CPUOffload, MixedPrecision, ShardingStrategy
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
        from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy

        fsdp_size = int(self.engine_config.fsdp_size)
        if 0 < fsdp_size < self._world:
            raise ValueError(
                f"fsdp_config.fsdp_size={fsdp_size} < {self._world} workers (HSDP) is supported by strategy "
                f"'fsdp2' only; use actor.strategy=fsdp2 or fsdp_size=-1"
            )
        offload = self._params_on_host
        policy = functools.partial(transformer_auto_wrap_policy, transformer_layer_cls=_layer_classes(model))
        p = self.precision
        return FSDP(
            model,
            auto_wrap_policy=policy,
            sharding_strategy=ShardingStrategy.FULL_SHARD,
            cpu_offload=CPUOffload(offload_params=offload),
            mixed_precision=MixedPrecision(
                param_dtype=p.param_dtype, reduce_dtype=p.reduce_dtype, buffer_dtype=p.buffer_dtype
            ) if p.casts_for_compute else None,
            device_id=self.device,
            use_orig_params=True,
            sync_module_states=False,  # every rank loaded the same checkpoint; new heads are synced
        )

    def _clip_grad_norm(self, max_norm: float) -> torch.Tensor:
        return self.module.clip_grad_norm_(max_norm)
