"""Engine sections of the schema: optimizer, FSDP, Megatron, checkpoint (upstream's ``verl.workers.config``
names: ``OptimizerConfig``, ``FSDPEngineConfig``, ``McoreEngineConfig``; ``CheckpointConfig``)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, ClassVar

from verl.trainer.config.derived import resolve_device, world_size
from verl.trainer.config.fields import Gate, above, below, opt, ref, section, select, when

LR_SCHEDULERS = ("constant", "cosine")


@dataclass
class OptimizerConfig:
    """AdamW and its learning-rate schedule."""

    lr: float = opt(1e-6, "learning rate", common=True)
    lr_warmup_steps: int = opt(-1, "warmup steps (< 0: use lr_warmup_steps_ratio)")
    lr_warmup_steps_ratio: float = opt(0.0, "warmup as a share of the total steps", when=below(".lr_warmup_steps", 0))
    lr_scheduler_type: str = opt("constant", "schedule after warmup", choices=LR_SCHEDULERS)
    min_lr_ratio: float = opt(0.0, "cosine: final lr as a share of lr", when=when(".lr_scheduler_type", "cosine"))
    num_cycles: float = opt(0.5, "cosine: number of half-waves", when=when(".lr_scheduler_type", "cosine"))
    weight_decay: float = opt(0.01, "AdamW weight decay")
    betas: list[float] = opt([0.9, 0.999], "AdamW betas")


@dataclass
class MixedPrecisionConfig:
    """Dtypes of the FSDP engines; trained weights stay fp32 masters whatever the compute dtype."""

    param_dtype: str = opt(
        "${..model_dtype}", "compute dtype (default: the section's model_dtype); auto: bf16 compute on fp32 "
        "masters where the device multiplies bf16 natively (CPU flags avx512_bf16, amx_bf16 or Arm bf16; CUDA "
        "sm80+) and model_dtype is fp32, else model_dtype (verl.workers.engine.precision)"
    )
    reduce_dtype: str = opt("fp32", "cross-rank gradient reduction dtype")
    buffer_dtype: str = opt("fp32", "dtype of floating buffers (rotary tables)")


def _strategy_key(here: str) -> str:
    """The ``strategy`` key of the role an engine section belongs to: ``<role>.fsdp_config`` ->
    ``<role>.strategy``; ``<role>.model.fsdp_config`` (critic, reward model) -> ``<role>.strategy``."""
    parent = here.rsplit(".", 1)[0]
    if parent.endswith(".model"):
        parent = parent.removesuffix(".model")
    return f"{parent}.strategy"


_FSDP = Gate(
    lambda here: f"{_strategy_key(here)} is fsdp or fsdp2",
    lambda cfg, here: select(cfg, _strategy_key(here)) in ("fsdp", "fsdp2"),
)


def _shards(cfg: Any, here: str) -> bool:
    rm = select(cfg, "reward.reward_model")
    if here.startswith("reward.reward_model.") and rm is not None and rm.enable_resource_pool:
        workers = int(rm.nnodes) * int(rm.n_gpus_per_node)
    else:
        workers = world_size(cfg)
    return workers > 1 or resolve_device(cfg) == "cuda"


#: one CPU worker keeps the plain module (no FSDP wrapping: verl.workers.engine.fsdp), so sharding options do nothing
_SHARDED = Gate(lambda here: "the model is sharded (more than one worker: trainer.nnodes * n_gpus_per_node > 1, or "
                "trainer.device=cuda)", _shards)


@dataclass
class FSDPEngineConfig:
    """The fsdp / fsdp2 training engine."""

    READ_WHEN: ClassVar[Gate] = _FSDP

    param_offload: bool = opt(False, "keep parameters in host memory between uses")
    optimizer_offload: bool = opt(False, "keep optimizer state in host memory between steps")
    offload_policy: bool = opt(False, "FSDP2 CPUOffloadPolicy (parameters, gradients and optimizer step on the CPU)")
    reshard_after_forward: bool = opt(True, "free gathered parameters after the forward pass", when=_SHARDED)
    fsdp_size: int = opt(-1, "ranks per FSDP shard group (-1: all workers of the role)", when=_SHARDED)
    forward_prefetch: bool = opt(
        False, "prefetch the next layer's parameters", refused="FSDP forward prefetch is not wired into the engines"
    )
    wrap_policy: dict[str, Any] = opt(
        {"min_num_params": 0},
        "FSDP wrapping",
        refused="the FSDP engines shard each decoder layer (transformer wrap), not by parameter count",
    )
    model_dtype: str = opt("fp32", "dtype the checkpoint is loaded in (verl.workers.engine.precision)")
    mixed_precision: MixedPrecisionConfig = section(MixedPrecisionConfig)


_NOT_TRAINED = "this model is not trained here (no optimizer, no gradients), so there is nothing to set"


@dataclass
class FrozenFSDPEngineConfig(FSDPEngineConfig):
    """The FSDP section of a model that is only run forward (the reference, the reward model)."""

    optimizer_offload: bool = opt(False, "keep optimizer state in host memory between steps", refused=_NOT_TRAINED)


def fsdp_following(model_dtype_key: str, cls: type = FSDPEngineConfig) -> Any:
    """An FSDP section whose model_dtype defaults to the model section's ``model_dtype``."""
    return section(cls, "the fsdp/fsdp2 engine", model_dtype=ref(model_dtype_key))


@dataclass
class McoreEngineConfig:
    """strategy=megatron (verl-workers[megatron]); tensor x pipeline x context sizes divide the workers."""

    READ_WHEN: ClassVar[Gate] = replace(when("..strategy", "megatron"), switches=())  # another engine's: always refused

    param_offload: bool = opt(False, "keep parameters in host memory between uses")
    grad_offload: bool = opt(False, "keep gradients in host memory")
    optimizer_offload: bool = opt(False, "keep optimizer state in host memory between steps")
    tensor_model_parallel_size: int = opt(1, "tensor-parallel group size")
    expert_model_parallel_size: int = opt(1, "expert-parallel group size (MoE)")
    pipeline_model_parallel_size: int = opt(1, "pipeline stages")
    virtual_pipeline_model_parallel_size: int | None = opt(None, "interleaved virtual stages per pipeline rank")
    context_parallel_size: int = opt(1, "context-parallel group size")
    sequence_parallel: bool = opt(True, "Megatron sequence parallelism (with tensor_model_parallel_size > 1)")
    use_distributed_optimizer: bool = opt(True, "shard the optimizer state over data-parallel ranks")
    seed: int = opt(42, "Megatron's random seed")
    override_transformer_config: dict[str, Any] = opt({}, "Megatron TransformerConfig fields (open dict)")
    override_ddp_config: dict[str, Any] = opt({}, "Megatron DistributedDataParallelConfig fields (open dict)")


@dataclass
class FrozenMcoreEngineConfig(McoreEngineConfig):
    """The Megatron section of a model that is only run forward (the reference)."""

    grad_offload: bool = opt(False, "keep gradients in host memory", refused=_NOT_TRAINED)
    optimizer_offload: bool = opt(False, "keep optimizer state in host memory between steps", refused=_NOT_TRAINED)
    use_distributed_optimizer: bool = opt(
        True, "shard the optimizer state over data-parallel ranks", refused=_NOT_TRAINED
    )
    override_ddp_config: dict[str, Any] = opt(
        {}, "Megatron DistributedDataParallelConfig fields (open dict)", refused=_NOT_TRAINED
    )


_ACTOR_MEGATRON = "actor_rollout_ref.actor.megatron"
#: the reference's parallel sizes, offload and seed follow the actor's (upstream)
REF_MEGATRON = section(
    FrozenMcoreEngineConfig,
    "the reference's Megatron section (sizes follow the actor's)",
    **{
        k: ref(f"{_ACTOR_MEGATRON}.{k}")
        for k in (
            "param_offload", "tensor_model_parallel_size", "expert_model_parallel_size",
            "pipeline_model_parallel_size", "virtual_pipeline_model_parallel_size", "context_parallel_size", "seed",
        )
    },
)


@dataclass
class CheckpointConfig:
    """What a checkpoint holds and what a resume loads."""

    save_contents: list[str] = opt(
        ["model", "optimizer", "extra"], "what a checkpoint holds: model, optimizer, extra (lr scheduler, RNG), hf_model",
        when=above("trainer.save_freq", 0),
    )
    load_contents: list[str] = opt(
        ref(".save_contents"), "what a resume loads", when=when("trainer.resume_mode", "auto", "resume_path")
    )
