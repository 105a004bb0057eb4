"""Typed schema of the PPO-family trainer config (upstream verl's key names).

The dataclasses give every key its type and default; `ppo_trainer.yaml` (shipped next to this file) is
the same defaults written out for users, and a test keeps the two identical. Values that default to
another key are OmegaConf interpolations (``"${data.max_prompt_length}"``), resolved once at load time.

Size semantics (see docs/contracts.md): ``data.train_batch_size`` and ``actor.ppo_mini_batch_size`` count
prompts; ``rollout.n`` turns each prompt into n trajectories; ``*_micro_batch_size_per_gpu`` counts
trajectories per worker. Fields typed ``dict[str, Any]`` are open: ``+key.new=value`` may add keys there.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from verl.trainer.config.distillation import DistillationConfig
from verl.trainer.config.megatron import MegatronConfig, ref_megatron_config

# Interpolation strings are typed as the target type for OmegaConf; the ignore keeps type checkers quiet.
_ACTOR = "actor_rollout_ref.actor"


def _ref(key: str) -> Any:
    return "${" + key + "}"


# --------------------------------------------------------------------------------------------- data
@dataclass
class CustomClsConfig:
    path: str | None = None
    name: str | None = None


@dataclass
class DataConfig:
    tokenizer: str | None = None
    train_files: Any = None  # str or list of str (parquet / jsonl)
    val_files: Any = None
    prompt_key: str = "prompt"
    reward_fn_key: str = "data_source"
    max_prompt_length: int = 512
    max_response_length: int = 512
    train_batch_size: int = 1024
    val_batch_size: int | None = None
    gen_batch_size: int = _ref("data.train_batch_size")
    train_max_samples: int = -1
    val_max_samples: int = -1
    return_raw_input_ids: bool = False
    return_raw_chat: bool = False
    return_full_prompt: bool = False
    shuffle: bool = True
    validation_shuffle: bool = False
    seed: int = _ref("trainer.seed")  # data order
    filter_overlong_prompts: bool = False
    filter_overlong_prompts_workers: int = 1
    truncation: str = "error"  # error | left | right | middle
    trust_remote_code: bool = False
    # Upstream default is 8; the prompt dataset is in memory and cheap, so 0 (main process) by default.
    dataloader_num_workers: int = 0
    apply_chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    # multimodal rows (verl.utils.dataset.vision; read with a vision-language model's processor)
    image_key: str = "images"
    video_key: str = "videos"  # video rows are refused (not supported yet)
    return_multi_modal_inputs: bool = True
    mm_processor_kwargs: dict[str, Any] = field(default_factory=dict)  # min_pixels, max_pixels
    custom_cls: CustomClsConfig = field(default_factory=CustomClsConfig)


# ----------------------------------------------------------------------------------- shared pieces
@dataclass
class OptimConfig:
    lr: float = 1e-6
    lr_warmup_steps: int = -1  # < 0: use lr_warmup_steps_ratio
    lr_warmup_steps_ratio: float = 0.0
    lr_scheduler_type: str = "constant"  # constant | cosine
    min_lr_ratio: float = 0.0
    num_cycles: float = 0.5
    weight_decay: float = 0.01
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])


@dataclass
class MixedPrecisionConfig:
    # compute dtype (default: the section's model_dtype); trained weights stay fp32 masters regardless
    param_dtype: str = "${..model_dtype}"
    reduce_dtype: str = "fp32"  # cross-rank gradient reduction
    buffer_dtype: str = "fp32"  # floating buffers (rotary tables)


@dataclass
class FSDPConfig:
    param_offload: bool = False
    optimizer_offload: bool = False
    offload_policy: bool = False
    reshard_after_forward: bool = True
    fsdp_size: int = -1  # -1: shard over all workers of the role
    forward_prefetch: bool = False
    wrap_policy: dict[str, Any] = field(default_factory=lambda: {"min_num_params": 0})
    model_dtype: str = "fp32"  # dtype the checkpoint is loaded in (see verl.workers.engine.precision)
    mixed_precision: MixedPrecisionConfig = field(default_factory=MixedPrecisionConfig)


def _fsdp_following(model_dtype_key: str) -> Any:
    """An FSDPConfig whose model_dtype defaults to the model section's ``model_dtype`` (the older key)."""
    return field(default_factory=lambda: FSDPConfig(model_dtype=_ref(model_dtype_key)))


@dataclass
class CheckpointConfig:
    save_contents: list[str] = field(default_factory=lambda: ["model", "optimizer", "extra"])
    load_contents: list[str] = _ref(".save_contents")


# ---------------------------------------------------------------------------- actor / rollout / ref
@dataclass
class FusedKernelOptionsConfig:
    # the fused log-prob/entropy's per-row softmax work: torch ops, or Triton kernels (GPU; same values)
    impl_backend: str = "torch"  # torch | triton


@dataclass
class ModelConfig:
    path: str | None = None
    tokenizer_path: str | None = None  # None: same as path
    custom_chat_template: str | None = None
    external_lib: str | None = None
    override_config: dict[str, Any] = field(default_factory=dict)
    enable_gradient_checkpointing: bool = True
    enable_activation_offload: bool = False
    use_remove_padding: bool = False
    # LoRA (peft; verl-workers[lora]): lora_rank > 0 or lora_adapter_path turns it on (actor only)
    lora_rank: int = 0
    lora_alpha: int = 16
    target_modules: Any = "all-linear"  # "all-linear" or a list of module names
    exclude_modules: Any = None  # null, a regex string or a list of module names
    lora_adapter_path: str | None = None  # a peft adapter folder to start from (its config wins)
    use_fused_kernels: bool = False  # chunked LM head + log-prob/entropy (never [tokens, vocab] logits)
    fused_kernel_options: FusedKernelOptionsConfig = field(default_factory=FusedKernelOptionsConfig)
    use_liger: bool = False  # Liger's Triton kernels (GPU + liger-kernel only)
    trust_remote_code: bool = False
    use_shm: bool = False
    model_dtype: str = "float32"  # default of actor/ref fsdp_config.model_dtype (the compute dtype)


@dataclass
class PolicyLossConfig:
    loss_mode: str = "vanilla"
    clip_cov_ratio: float = 0.0002
    clip_cov_lb: float = 1.0
    clip_cov_ub: float = 5.0
    kl_cov_ratio: float = 0.0002
    ppo_kl_coef: float = 0.1
    dro_beta: float | None = None  # loss_mode=dro: weight of the quadratic log-ratio penalty (> 0)


@dataclass
class ActorConfig:
    strategy: str = "fsdp2"  # fsdp2 | fsdp | megatron
    ppo_mini_batch_size: int = 256  # prompts per optimizer step
    ppo_micro_batch_size_per_gpu: int | None = 4  # trajectories per worker per forward/backward
    use_dynamic_bsz: bool = False
    ppo_max_token_len_per_gpu: int = 16384
    ppo_epochs: int = 1
    shuffle: bool = False
    clip_ratio: float = 0.2
    clip_ratio_low: float = _ref(".clip_ratio")
    clip_ratio_high: float = _ref(".clip_ratio")
    clip_ratio_c: float = 3.0
    loss_agg_mode: str = "token-mean"
    entropy_coeff: float = 0.0
    # old_log_probs := the rollout's own log-probs (needs rollout.calculate_log_probs): no extra forward
    use_rollout_log_probs: bool = False
    use_kl_loss: bool = False
    # vision-language models: no gradient into the vision tower (model.visual)
    freeze_vision_tower: bool = False
    kl_loss_coef: float = 0.001
    kl_loss_type: str = "low_var_kl"
    use_torch_compile: bool = False
    # recompute the entropy's softmax in backward (torch.utils.checkpoint) instead of keeping it: less
    # memory when entropy_coeff != 0 (fsdp engines; the fused kernel already recomputes per chunk)
    entropy_checkpointing: bool = False
    ulysses_sequence_parallel_size: int = 1
    grad_clip: float = 1.0
    policy_loss: PolicyLossConfig = field(default_factory=PolicyLossConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    fsdp_config: FSDPConfig = _fsdp_following("actor_rollout_ref.model.model_dtype")
    megatron: MegatronConfig = field(default_factory=MegatronConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)


@dataclass
class RefConfig:
    strategy: str = _ref(f"{_ACTOR}.strategy")
    log_prob_micro_batch_size_per_gpu: int | None = 8
    log_prob_use_dynamic_bsz: bool = _ref(f"{_ACTOR}.use_dynamic_bsz")
    log_prob_max_token_len_per_gpu: int = _ref(f"{_ACTOR}.ppo_max_token_len_per_gpu")
    ulysses_sequence_parallel_size: int = _ref(f"{_ACTOR}.ulysses_sequence_parallel_size")
    fsdp_config: FSDPConfig = _fsdp_following("actor_rollout_ref.model.model_dtype")
    megatron: MegatronConfig = field(default_factory=ref_megatron_config)


@dataclass
class ValKwargsConfig:
    temperature: float = 0.0
    top_k: int = -1
    top_p: float = 1.0
    do_sample: bool = False
    n: int = 1


@dataclass
class AgentConfig:
    default_agent_loop: str = "single_turn_agent"
    num_workers: int = 8
    agent_loop_config_path: str | None = None


@dataclass
class MultiTurnConfig:
    enable: bool = False
    max_assistant_turns: int | None = None
    max_user_turns: int | None = None
    max_parallel_calls: int = 1
    max_tool_response_length: int = 256
    tool_response_truncate_side: str = "middle"
    tool_timeout: float = 60.0  # seconds one tool call may take; then the model sees an error (tool_timeouts)
    tool_config_path: str | None = None
    function_tool_path: str | None = None
    interaction_config_path: str | None = None
    format: str = "hermes"
    # verl-agent: compare each trajectory with the chat template's rendering (strict | ignore_strippable | warn | disable)
    tokenization_sanity_check_mode: str = "warn"


@dataclass
class RolloutConfig:
    name: str = "native"
    mode: str = "sync"  # sync | async
    # sampling: each worker draws from generators seeded with seed + its rank (vllm/sglang: engine seed)
    seed: int = 42
    temperature: float = 1.0
    top_k: int = -1
    top_p: float = 1.0
    do_sample: bool = True
    n: int = 5
    ignore_eos: bool = False
    prompt_length: int = _ref("data.max_prompt_length")
    response_length: int = _ref("data.max_response_length")
    dtype: str = "bfloat16"
    log_prob_micro_batch_size_per_gpu: int | None = 8
    log_prob_use_dynamic_bsz: bool = _ref(f"{_ACTOR}.use_dynamic_bsz")
    log_prob_max_token_len_per_gpu: int = _ref(f"{_ACTOR}.ppo_max_token_len_per_gpu")
    calculate_log_probs: bool = False
    micro_batch_size: int | None = None  # HF rollout: prompts per generate() call; None = all at once
    tensor_model_parallel_size: int = 1
    gpu_memory_utilization: float = 0.5
    max_num_batched_tokens: int = 8192
    max_model_len: int | None = None
    max_num_seqs: int = 1024
    enable_chunked_prefill: bool = True
    enable_prefix_caching: bool = True
    enforce_eager: bool = True
    free_cache_engine: bool = True
    load_format: str = "dummy"
    # gather the actor's weights for the rollout one decoder layer at a time (LoRA merged per layer)
    # instead of the whole model at once: peak memory about one layer (fsdp2 engine)
    layered_summon: bool = False
    lora_sync: str = "merged"  # with LoRA: merged weights, or (vllm) the adapter through vLLM's LoRA path
    engine_kwargs: dict[str, Any] = field(default_factory=dict)
    val_kwargs: ValKwargsConfig = field(default_factory=ValKwargsConfig)
    multi_turn: MultiTurnConfig = field(default_factory=MultiTurnConfig)
    agent: AgentConfig = field(default_factory=AgentConfig)


@dataclass
class ActorRolloutRefConfig:
    hybrid_engine: bool = True
    model: ModelConfig = field(default_factory=ModelConfig)
    actor: ActorConfig = field(default_factory=ActorConfig)
    ref: RefConfig = field(default_factory=RefConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)


# ------------------------------------------------------------------------------------------- critic
@dataclass
class CriticModelConfig:
    path: str | None = _ref("actor_rollout_ref.model.path")
    tokenizer_path: str | None = _ref("actor_rollout_ref.model.path")
    external_lib: str | None = _ref("actor_rollout_ref.model.external_lib")
    override_config: dict[str, Any] = field(default_factory=dict)
    enable_gradient_checkpointing: bool = True
    use_remove_padding: bool = False
    trust_remote_code: bool = _ref("actor_rollout_ref.model.trust_remote_code")
    model_dtype: str = "float32"  # default of critic.model.fsdp_config.model_dtype
    fsdp_config: FSDPConfig = _fsdp_following("critic.model.model_dtype")


def _critic_optim() -> OptimConfig:
    return OptimConfig(lr=1e-5)


@dataclass
class CriticConfig:
    enable: bool | None = None  # None: on iff algorithm.adv_estimator == gae
    strategy: str = _ref(f"{_ACTOR}.strategy")
    rollout_n: int = _ref("actor_rollout_ref.rollout.n")
    ppo_mini_batch_size: int = _ref(f"{_ACTOR}.ppo_mini_batch_size")
    ppo_micro_batch_size_per_gpu: int | None = 4
    forward_micro_batch_size_per_gpu: int | None = _ref(".ppo_micro_batch_size_per_gpu")
    use_dynamic_bsz: bool = _ref(f"{_ACTOR}.use_dynamic_bsz")
    ppo_max_token_len_per_gpu: int = 32768
    forward_max_token_len_per_gpu: int = _ref(".ppo_max_token_len_per_gpu")
    ppo_epochs: int = _ref(f"{_ACTOR}.ppo_epochs")
    shuffle: bool = _ref(f"{_ACTOR}.shuffle")
    cliprange_value: float = 0.5
    loss_agg_mode: str = _ref(f"{_ACTOR}.loss_agg_mode")
    grad_clip: float = 1.0
    ulysses_sequence_parallel_size: int = 1
    model: CriticModelConfig = field(default_factory=CriticModelConfig)
    megatron: MegatronConfig = field(default_factory=MegatronConfig)
    optim: OptimConfig = field(default_factory=_critic_optim)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)


# ------------------------------------------------------------------------------------------- reward
@dataclass
class CustomRewardFunctionConfig:
    path: str | None = None
    name: str = "compute_score"
    reward_kwargs: dict[str, Any] = field(default_factory=dict)


def _sandbox_defaults() -> dict[str, Any]:
    # Open dict: the keys besides ``name`` are the chosen sandbox's constructor options (verl-rewards),
    # e.g. +reward.sandbox.url=... for sandbox_fusion, +reward.sandbox.max_concurrent=4.
    return {"name": "local", "timeout": 10.0, "memory_mb": 1024}


@dataclass
class OverlongBufferConfig:
    enable: bool = False
    len: int = 0
    penalty_factor: float = 1.0
    log: bool = False


@dataclass
class RewardModelModelConfig:
    path: str | None = None
    input_tokenizer: str | None = _ref("actor_rollout_ref.model.path")
    external_lib: str | None = None
    trust_remote_code: bool = False
    use_remove_padding: bool = False
    fsdp_config: FSDPConfig = field(default_factory=FSDPConfig)


@dataclass
class RewardModelConfig:
    enable: bool = False
    enable_resource_pool: bool = False  # true: the RM gets its own pool of nnodes x n_gpus_per_node workers
    n_gpus_per_node: int = 8
    nnodes: int = 0
    strategy: str = _ref(f"{_ACTOR}.strategy")
    micro_batch_size_per_gpu: int | None = None
    max_length: int | None = None
    use_dynamic_bsz: bool = _ref(f"{_ACTOR}.use_dynamic_bsz")
    forward_max_token_len_per_gpu: int = _ref("critic.forward_max_token_len_per_gpu")
    model: RewardModelModelConfig = field(default_factory=RewardModelModelConfig)


@dataclass
class RewardConfig:
    reward_manager: str = "naive"
    reward_kwargs: dict[str, Any] = field(default_factory=dict)
    num_examine: int = 0
    launch_reward_fn_async: bool = False
    custom_reward_function: CustomRewardFunctionConfig = field(default_factory=CustomRewardFunctionConfig)
    sandbox: dict[str, Any] = field(default_factory=_sandbox_defaults)
    overlong_buffer: OverlongBufferConfig = field(default_factory=OverlongBufferConfig)
    reward_model: RewardModelConfig = field(default_factory=RewardModelConfig)


# ---------------------------------------------------------------------------------------- algorithm
@dataclass
class KLControlConfig:
    type: str = "fixed"  # fixed | adaptive
    kl_coef: float = 0.001
    horizon: int = 10000
    target_kl: float = 0.1


@dataclass
class FilterGroupsConfig:
    enable: bool = False
    metric: str | None = None  # e.g. acc, score, seq_reward
    max_num_gen_batches: int = 0  # <= 0: no limit


@dataclass
class RolloutCorrectionConfig:
    """``algorithm.rollout_correction`` (upstream's keys and defaults; see ``ppo.rollout_corr_helper``)."""

    rollout_is: str | None = None  # null (off) | token | sequence: truncated IS weights pi_old / pi_rollout
    rollout_is_threshold: float = 2.0  # upper bound of the weights (TIS)
    rollout_rs: str | None = None  # rejection sampling: not implemented, must stay null
    rollout_rs_threshold: float | None = None  # (with rollout_rs) must stay null
    bypass_mode: bool = False  # true: old_log_probs := rollout_log_probs (no trainer forward, no weights)
    loss_type: str = "ppo_clip"  # bypass-mode loss; only ppo_clip is implemented
    rollout_is_batch_normalize: bool = False  # divide the weights by their batch mean


@dataclass
class AlgorithmConfig:
    adv_estimator: str = "grpo"
    gamma: float = 1.0
    lam: float = 1.0
    norm_adv_by_std_in_grpo: bool = True
    use_kl_in_reward: bool = False
    kl_penalty: str = "kl"
    kl_ctrl: KLControlConfig = field(default_factory=KLControlConfig)
    filter_groups: FilterGroupsConfig = field(default_factory=FilterGroupsConfig)
    rollout_correction: RolloutCorrectionConfig = field(default_factory=RolloutCorrectionConfig)


# ------------------------------------------------------------------------------------------ trainer
@dataclass
class TrainerConfig:
    device: str = "auto"  # auto | cpu | cuda; read the resolved value with resolve_device(cfg)
    nnodes: int = 1
    n_gpus_per_node: int = 8  # workers per node (per CPU node when device is cpu)
    logger: list[str] = field(default_factory=lambda: ["console"])
    project_name: str = "verl_examples"
    experiment_name: str = "gsm8k"
    default_local_dir: str = "checkpoints/${trainer.project_name}/${trainer.experiment_name}"
    total_epochs: int = 30
    total_training_steps: int | None = None
    save_freq: int = -1
    test_freq: int = -1
    val_before_train: bool = True
    val_only: bool = False
    critic_warmup: int = 0
    resume_mode: str = "auto"  # auto | disable | resume_path
    resume_from_path: str | None = None
    del_local_ckpt_after_load: bool = False
    max_actor_ckpt_to_keep: int | None = None
    max_critic_ckpt_to_keep: int | None = None
    balance_batch: bool = True
    # ray: worker processes under the Ray single controller; local: the one worker in the driver's process
    worker_backend: str = "ray"
    log_val_generations: int = 0
    rollout_data_dir: str | None = None
    validation_data_dir: str | None = None
    ray_wait_register_center_timeout: int = 300
    seed: int = 1  # the driver, every worker (seed + rank) and, through data.seed, the data order
    progress_bar: bool = True


@dataclass
class RayKwargsConfig:
    ray_init: dict[str, Any] = field(default_factory=lambda: {"num_cpus": None})
    timeline_json_file: str | None = None


# ---------------------------------------------------------------------------------------------- root
@dataclass
class PPOTrainerConfig:
    """Root of the config that ``python -m verl.trainer.main_ppo`` reads."""

    data: DataConfig = field(default_factory=DataConfig)
    actor_rollout_ref: ActorRolloutRefConfig = field(default_factory=ActorRolloutRefConfig)
    critic: CriticConfig = field(default_factory=CriticConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    ray_kwargs: RayKwargsConfig = field(default_factory=RayKwargsConfig)
    distillation: DistillationConfig = field(default_factory=DistillationConfig)
