"""Role sections of the schema: the policy's model, actor, reference and rollout; the critic; the reward
model (upstream's ``verl.workers.config`` names where it has them: ``HFModelConfig``, ``PolicyLossConfig``,
``ActorConfig``, ``RolloutConfig``, ``SamplingConfig``, ``MultiTurnConfig``, ``AgentLoopConfig``,
``CriticConfig``, ``RewardModelConfig``).

Sizes: ``ppo_mini_batch_size`` counts prompts (x rollout.n trajectories); ``*_micro_batch_size_per_gpu``
counts trajectories per worker.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from verl.trainer.config.derived import use_critic, use_reference_policy
from verl.trainer.config.engine import (
    REF_MEGATRON,
    CheckpointConfig,
    FrozenFSDPEngineConfig,
    FSDPEngineConfig,
    McoreEngineConfig,
    OptimizerConfig,
    fsdp_following,
)
from verl.trainer.config.fields import Gate, above, opt, ref, section, select, when

_ACTOR = "actor_rollout_ref.actor"
STRATEGIES = ("fsdp2", "fsdp", "megatron")
LOSS_AGG_MODES = ("token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")
_KL = ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3")
#: KL estimators (``verl.trainer.ppo.kl``); a ``+`` suffix is straight-through; ``full`` is refused there
KL_PENALTY_TYPES = (*_KL, *(k + "+" for k in _KL), "full")
#: the engines whose own server holds the weights (every option of theirs is refused with native / hf)
SERVED = ("vllm", "sglang")

CRITIC_RUNS = Gate(
    lambda here: "the critic runs (algorithm.adv_estimator=gae or critic.enable=true)",
    lambda cfg, here: use_critic(cfg),
    ("algorithm.adv_estimator", "critic.enable"),
)
REF_RUNS = Gate(
    lambda here: "the reference policy runs (actor_rollout_ref.actor.use_kl_loss=true or algorithm.use_kl_in_reward=true)",
    lambda cfg, here: use_reference_policy(cfg),
    (f"{_ACTOR}.use_kl_loss", "algorithm.use_kl_in_reward"),
)


def _actor_computes_old_log_probs(cfg: Any, here: str) -> bool:
    return not (cfg.actor_rollout_ref.actor.use_rollout_log_probs or cfg.algorithm.rollout_correction.bypass_mode)


OLD_LOG_PROBS = Gate(
    lambda here: "the actor computes the old log-probs (actor_rollout_ref.actor.use_rollout_log_probs=false and "
    "algorithm.rollout_correction.bypass_mode=false)",
    _actor_computes_old_log_probs,
    (f"{_ACTOR}.use_rollout_log_probs", "algorithm.rollout_correction.bypass_mode"),
)
LORA = above("actor_rollout_ref.model.lora_rank", 0)
#: the plain rollouts take the dataset's left-padded prompts as they are; agent loops and served engines size by it
_PROMPT_WIDTH = Gate(
    lambda here: f"agent loops ({here}.multi_turn.enable=true) or a served engine ({here}.name=vllm or sglang) "
    "generate",
    lambda cfg, here: bool(select(cfg, here).multi_turn.enable) or select(cfg, here).name in SERVED,
    (".multi_turn.enable",),
)


#: agent loops on the trainer's own engines (native, hf) go through verl-agent's HF server, which generates
#: request by request: the batched generate call's options do not reach it
_ONE_GENERATE_CALL = Gate(
    lambda here: f"one generate call per batch ({here}.multi_turn.enable=false) or a served engine "
    f"({here}.name=vllm or sglang)",
    lambda cfg, here: not bool(select(cfg, here).multi_turn.enable) or select(cfg, here).name in SERVED,
)
_TOOLS = Gate(
    lambda here: f"the agent loops have tools ({here}.tool_config_path or {here}.function_tool_path is set)",
    lambda cfg, here: select(cfg, here).tool_config_path is not None or select(cfg, here).function_tool_path is not None,
    (".tool_config_path", ".function_tool_path"),
)


@dataclass
class FusedKernelOptionsConfig:
    """The fused log-prob/entropy kernel."""

    impl_backend: str = opt(
        "torch", "the per-row softmax work: torch ops, or Triton kernels (CUDA GPU; same values)",
        choices=("torch", "triton"),
    )


@dataclass
class HFModelConfig:
    """A Hugging Face model directory and how it is built."""

    path: str | None = opt(None, "model directory (Hugging Face layout); required", common=True)
    tokenizer_path: str | None = opt(None, "tokenizer directory (null: the model path)")
    custom_chat_template: str | None = opt(None, "a Jinja chat template replacing the tokenizer's")
    external_lib: str | None = opt(None, "a module imported before the model is built (registers architectures)")
    override_config: dict[str, Any] = opt({}, "fields written over the model's HF config (open dict)")
    enable_gradient_checkpointing: bool = opt(True, "recompute activations in the backward pass (less memory)")
    enable_activation_offload: bool = opt(False, "move saved activations to host memory during the forward pass")
    use_remove_padding: bool = opt(False, "pack the real tokens of a micro-batch (no padding) in each forward")
    lora_rank: int = opt(0, "LoRA rank; > 0 turns LoRA on (verl-workers[lora]; actor only)")
    lora_alpha: int = opt(16, "LoRA alpha (the adapter's scale is lora_alpha / lora_rank)", when=above(".lora_rank", 0))
    target_modules: Any = opt(
        "all-linear", "LoRA targets: 'all-linear' or a list of module names", when=above(".lora_rank", 0)
    )
    exclude_modules: Any = opt(
        None, "LoRA exclusions: null, a regex string or a list of module names", when=above(".lora_rank", 0)
    )
    lora_adapter_path: str | None = opt(None, "a peft adapter folder to start from (its config wins)")
    use_fused_kernels: bool = opt(False, "chunked LM head + log-prob/entropy (never [tokens, vocab] logits)")
    fused_kernel_options: FusedKernelOptionsConfig = section(FusedKernelOptionsConfig)
    use_liger: bool = opt(False, "Liger's Triton kernels (GPU + liger-kernel only)")
    trust_remote_code: bool = opt(False, "allow the model's/tokenizer's own Python code from its directory")
    use_shm: bool = opt(
        False, "load the model through /dev/shm",
        refused="loading the model through /dev/shm is not implemented; copy the model to /dev/shm yourself "
        "and point model.path there",
    )
    model_dtype: str = opt("float32", "dtype the weights are loaded in (default of the roles' fsdp_config.model_dtype)")


_CLIP_COV = when(".loss_mode", "clip_cov")
_KL_COV = when(".loss_mode", "kl_cov")


@dataclass
class PolicyLossConfig:
    """The policy loss (``verl.trainer.ppo.core_algos`` registry) and its options."""

    loss_mode: str = opt("vanilla", "policy loss from the registry: vanilla | clip_cov | kl_cov | gpg | dro | dppo_tv | dppo_kl | ...")
    clip_cov_ratio: float = opt(0.0002, "clip_cov: share of tokens whose gradient is clipped", when=_CLIP_COV)
    clip_cov_lb: float = opt(1.0, "clip_cov: lower bound of the covariance window", when=_CLIP_COV)
    clip_cov_ub: float = opt(5.0, "clip_cov: upper bound of the covariance window", when=_CLIP_COV)
    kl_cov_ratio: float = opt(0.0002, "kl_cov: share of tokens given the KL penalty", when=_KL_COV)
    ppo_kl_coef: float = opt(0.1, "kl_cov: weight of the KL penalty", when=_KL_COV)
    dro_beta: float | None = opt(
        None, "loss_mode=dro: weight of the quadratic log-ratio penalty (> 0)", when=when(".loss_mode", "dro")
    )


@dataclass
class ActorConfig:
    """The trained policy (upstream splits it into FSDPActorConfig / McoreActorConfig; here one section)."""

    strategy: str = opt("fsdp2", "training engine", choices=STRATEGIES, common=True)
    ppo_mini_batch_size: int = opt(256, "prompts per optimizer step (x rollout.n trajectories)", common=True)
    ppo_micro_batch_size_per_gpu: int | None = opt(4, "trajectories per worker per forward/backward", common=True)
    use_dynamic_bsz: bool = opt(False, "micro-batches by a token budget (ppo_max_token_len_per_gpu) instead of rows")
    ppo_max_token_len_per_gpu: int = opt(16384, "tokens per micro-batch per worker with use_dynamic_bsz")
    ppo_epochs: int = opt(1, "passes over each step's batch")
    shuffle: bool = opt(False, "shuffle the trajectories of each mini-batch")
    clip_ratio: float = opt(0.2, "PPO clip epsilon (both sides unless clip_ratio_low/high are set)")
    clip_ratio_low: float = opt(ref(".clip_ratio"), "lower clip epsilon")
    clip_ratio_high: float = opt(ref(".clip_ratio"), "upper clip epsilon (DAPO clip-higher: 0.28)")
    clip_ratio_c: float = opt(3.0, "dual-clip bound for negative advantages")
    loss_agg_mode: str = opt("token-mean", "how token losses are averaged", choices=LOSS_AGG_MODES)
    entropy_coeff: float = opt(0.0, "weight of the entropy bonus in the policy loss")
    use_rollout_log_probs: bool = opt(
        False, "old_log_probs := the rollout's own (needs rollout.calculate_log_probs): no extra forward"
    )
    use_kl_loss: bool = opt(False, "add a KL-to-reference term to the policy loss (GRPO style)", common=True)
    freeze_vision_tower: bool = opt(False, "vision-language models: no gradient into the vision tower")
    kl_loss_coef: float = opt(0.001, "weight of the KL loss", when=when(".use_kl_loss"))
    kl_loss_type: str = opt(
        "low_var_kl", "KL estimator of the loss ('+': straight-through)", choices=KL_PENALTY_TYPES,
        when=when(".use_kl_loss"),
    )
    use_torch_compile: bool | None = opt(
        None, "torch.compile (inductor) the actor's decoder layers (forward + backward), its log-prob/entropy "
        "functions and the native rollout's decode step (fsdp2, no Ulysses, no LoRA); null: on where the run's "
        "trained tokens x parameters repay the compile and inductor builds kernels for the device, the engine "
        "logs which (verl.workers.engine.compile); true: always (refused where it cannot be); false: eager",
    )
    entropy_checkpointing: bool = opt(False, "recompute the entropy's softmax in backward (less memory; fsdp)")
    ulysses_sequence_parallel_size: int = opt(1, "Ulysses sequence-parallel group size (fsdp2)")
    grad_clip: float = opt(1.0, "gradient-norm clipping threshold")
    policy_loss: PolicyLossConfig = section(PolicyLossConfig)
    optim: OptimizerConfig = section(OptimizerConfig)
    fsdp_config: FSDPEngineConfig = fsdp_following("actor_rollout_ref.model.model_dtype")
    megatron: McoreEngineConfig = section(McoreEngineConfig)
    checkpoint: CheckpointConfig = section(CheckpointConfig)


@dataclass
class RefConfig:
    """The reference policy (KL loss / KL in reward); shares the actor's workers."""

    READ_WHEN: ClassVar[Gate | None] = REF_RUNS

    strategy: str = opt(ref(f"{_ACTOR}.strategy"), "training engine", choices=STRATEGIES)
    log_prob_micro_batch_size_per_gpu: int | None = opt(8, "trajectories per worker per log-prob forward")
    log_prob_use_dynamic_bsz: bool = opt(ref(f"{_ACTOR}.use_dynamic_bsz"), "log-prob micro-batches by a token budget")
    log_prob_max_token_len_per_gpu: int = opt(
        ref(f"{_ACTOR}.ppo_max_token_len_per_gpu"), "tokens per log-prob micro-batch per worker (dynamic batching)",
        when=when(".log_prob_use_dynamic_bsz"),
    )
    ulysses_sequence_parallel_size: int = opt(
        ref(f"{_ACTOR}.ulysses_sequence_parallel_size"), "Ulysses sequence-parallel group size"
    )
    fsdp_config: FSDPEngineConfig = fsdp_following("actor_rollout_ref.model.model_dtype", FrozenFSDPEngineConfig)
    megatron: McoreEngineConfig = REF_MEGATRON


@dataclass
class SamplingConfig:
    """Sampling of the validation rollouts."""

    temperature: float = opt(0.0, "sampling temperature")
    top_k: int = opt(-1, "top-k sampling (-1: off)")
    top_p: float = opt(1.0, "nucleus sampling threshold")
    do_sample: bool = opt(False, "sample (false: greedy)")
    n: int = opt(1, "samples per validation prompt")


@dataclass
class AgentLoopConfig:
    """Agent loops (verl-agent)."""

    READ_WHEN: ClassVar[Gate] = when("..multi_turn.enable")

    default_agent_loop: str = opt("single_turn_agent", "agent loop used when a row names none")
    num_workers: int = opt(8, "agent-loop workers")
    agent_loop_config_path: str | None = opt(None, "YAML registering agent loops")


@dataclass
class MultiTurnConfig:
    """Multi-turn rollouts with tools and interactions (verl-agent)."""

    READ_WHEN: ClassVar[Gate] = when(".enable")
    OPENS: ClassVar[tuple[str, ...]] = ("enable",)

    enable: bool = opt(False, "run agent loops (tools, interactions) instead of one generate call")
    max_assistant_turns: int | None = opt(None, "assistant turns per conversation (null: until max length)")
    max_user_turns: int | None = opt(None, "user/tool turns per conversation (null: until max length)")
    max_parallel_calls: int = opt(1, "tool calls run per turn", when=_TOOLS)
    max_tool_response_length: int = opt(256, "tokens kept of each tool response", when=_TOOLS)
    tool_response_truncate_side: str = opt(
        "middle", "which part of a long tool response is cut", choices=("left", "right", "middle"), when=_TOOLS
    )
    tool_timeout: float = opt(60.0, "seconds a tool call may take; then the model sees an error", when=_TOOLS)
    tool_config_path: str | None = opt(None, "YAML listing the tools")
    function_tool_path: str | None = opt(None, "a Python file of @function_tool functions (verl.tools)")
    interaction_config_path: str | None = opt(None, "YAML listing the interactions (simulated users)")
    format: str = opt("hermes", "how the model writes tool calls: hermes | gpt-oss (verl.registries.TOOL_CALL_FORMATS)")
    tokenization_sanity_check_mode: str = opt(
        "warn", "compare each trajectory with the chat template's rendering (the tool agent loop)",
        choices=("strict", "ignore_strippable", "warn", "disable"), when=_TOOLS,
    )


@dataclass
class RolloutConfig:
    """Generation: the engine, sampling, and the served engines' options (vllm, sglang)."""

    name: str = opt("native", "rollout engine: native (fused KV-cache loop) | hf | vllm | sglang", common=True)
    mode: str = opt("sync", "sync (batched generate) | async (server-style, for agent loops)",
                    choices=("sync", "async"), engines=("vllm",))
    seed: int = opt(42, "sampling: generators seeded with seed + worker rank (vllm / sglang: the engine seed)")
    temperature: float = opt(1.0, "sampling temperature", common=True)
    top_k: int = opt(-1, "top-k sampling (-1: off)")
    top_p: float = opt(1.0, "nucleus sampling threshold")
    do_sample: bool = opt(True, "sample (false: greedy)")
    n: int = opt(5, "trajectories sampled per prompt (group estimators need n > 1)", common=True)
    ignore_eos: bool = opt(False, "keep generating after the end-of-sequence token", when=_ONE_GENERATE_CALL)
    prompt_length: int = opt(ref("data.max_prompt_length"), "prompt tokens the rollout accepts", when=_PROMPT_WIDTH)
    response_length: int = opt(ref("data.max_response_length"), "tokens generated per response")
    dtype: str = opt("bfloat16", "the served engine's compute dtype (native/hf run the actor's weights)",
                     engines=SERVED)
    log_prob_micro_batch_size_per_gpu: int | None = opt(
        8, "trajectories per worker per log-prob forward", when=OLD_LOG_PROBS
    )
    log_prob_use_dynamic_bsz: bool = opt(
        ref(f"{_ACTOR}.use_dynamic_bsz"), "log-prob micro-batches by a token budget", when=OLD_LOG_PROBS
    )
    log_prob_max_token_len_per_gpu: int = opt(
        ref(f"{_ACTOR}.ppo_max_token_len_per_gpu"), "tokens per log-prob micro-batch per worker (dynamic batching)",
        when=(OLD_LOG_PROBS, when(".log_prob_use_dynamic_bsz")),
    )
    calculate_log_probs: bool = opt(False, "return the sampling log-probs with each response")
    micro_batch_size: int | None = opt(None, "hf rollout: prompts per generate() call (null: all at once)",
                                       engines=("hf",), when=_ONE_GENERATE_CALL)
    tensor_model_parallel_size: int = opt(1, "the served engine's tensor-parallel size", engines=SERVED)
    gpu_memory_utilization: float = opt(0.5, "share of GPU memory for weights and KV cache", engines=SERVED)
    max_num_batched_tokens: int = opt(8192, "tokens per engine step", engines=SERVED)
    max_model_len: int | None = opt(None, "longest sequence (null: prompt + response length)", engines=SERVED)
    max_num_seqs: int = opt(1024, "sequences per engine step", engines=SERVED)
    enable_chunked_prefill: bool = opt(True, "split long prefills", engines=("vllm",))
    enable_prefix_caching: bool = opt(True, "reuse the KV cache of shared prefixes", engines=SERVED)
    enforce_eager: bool = opt(True, "no CUDA graphs", engines=SERVED)
    free_cache_engine: bool = opt(True, "release the KV cache between rollouts (sleep mode)", engines=SERVED)
    load_format: str = opt("dummy", "initial weights (dummy: synced from the actor)", engines=SERVED)
    layered_summon: bool = opt(False, "gather the actor's weights for the rollout one decoder layer at a time")
    lora_sync: str = opt("merged", "with LoRA: merged weights (every engine) or adapter (vllm's LoRA path)",
                         choices=("merged", "adapter"), when=LORA)
    engine_kwargs: dict[str, Any] = opt({}, "engine options: engine_kwargs.vllm.* / engine_kwargs.sglang.* (open dict)")
    val_kwargs: SamplingConfig = section(SamplingConfig)
    multi_turn: MultiTurnConfig = section(MultiTurnConfig)
    agent: AgentLoopConfig = section(AgentLoopConfig)


@dataclass
class ActorRolloutRefConfig:
    """The policy: one worker group holds the actor (trained), the rollout (generates) and the reference."""

    hybrid_engine: bool = opt(
        True, "actor and rollout share workers (the colocated loop)",
        refused="the PPO-family trainer runs the rollout on the actor's workers; a rollout on a pool of its own "
        "is what the asynchronous trainers of recipes/fully_async do (verl-fully-async, verl-one-step-off)",
    )
    model: HFModelConfig = section(HFModelConfig)
    actor: ActorConfig = section(ActorConfig)
    ref: RefConfig = section(RefConfig)
    rollout: RolloutConfig = section(RolloutConfig)


@dataclass
class CriticModelConfig:
    """The value model (default: built from the policy's model)."""

    path: str | None = opt(ref("actor_rollout_ref.model.path"), "model directory (default: the policy's)")
    tokenizer_path: str | None = opt(ref("actor_rollout_ref.model.path"), "tokenizer directory")
    external_lib: str | None = opt(ref("actor_rollout_ref.model.external_lib"), "a module imported before the model is built")
    override_config: dict[str, Any] = opt({}, "fields written over the model's HF config (open dict)")
    enable_gradient_checkpointing: bool = opt(True, "recompute activations in the backward pass (less memory)")
    use_remove_padding: bool = opt(False, "pack the real tokens of a micro-batch (no padding) in each forward")
    trust_remote_code: bool = opt(ref("actor_rollout_ref.model.trust_remote_code"), "allow the model's own code")
    model_dtype: str = opt("float32", "dtype the weights are loaded in (default of fsdp_config.model_dtype)")
    fsdp_config: FSDPEngineConfig = fsdp_following("critic.model.model_dtype")


@dataclass
class CriticConfig:
    """The value model (used by adv_estimator=gae)."""

    READ_WHEN: ClassVar[Gate] = CRITIC_RUNS
    OPENS: ClassVar[tuple[str, ...]] = ("enable",)

    enable: bool | None = opt(None, "null: on iff algorithm.adv_estimator == gae")
    strategy: str = opt(ref(f"{_ACTOR}.strategy"), "training engine", choices=STRATEGIES)
    rollout_n: int = opt(ref("actor_rollout_ref.rollout.n"), "samples per prompt (follows actor_rollout_ref.rollout.n)")
    ppo_mini_batch_size: int = opt(ref(f"{_ACTOR}.ppo_mini_batch_size"), "prompts per optimizer step")
    ppo_micro_batch_size_per_gpu: int | None = opt(4, "trajectories per worker per forward/backward")
    forward_micro_batch_size_per_gpu: int | None = opt(ref(".ppo_micro_batch_size_per_gpu"), "trajectories per worker per value forward")
    use_dynamic_bsz: bool = opt(ref(f"{_ACTOR}.use_dynamic_bsz"), "micro-batches by a token budget")
    ppo_max_token_len_per_gpu: int = opt(32768, "tokens per micro-batch per worker with use_dynamic_bsz")
    forward_max_token_len_per_gpu: int = opt(ref(".ppo_max_token_len_per_gpu"), "tokens per forward micro-batch (dynamic)")
    ppo_epochs: int = opt(ref(f"{_ACTOR}.ppo_epochs"), "passes over each step's batch")
    shuffle: bool = opt(ref(f"{_ACTOR}.shuffle"), "shuffle the trajectories of each mini-batch")
    cliprange_value: float = opt(0.5, "clip range of the value loss")
    loss_agg_mode: str = opt(ref(f"{_ACTOR}.loss_agg_mode"), "how token losses are averaged", choices=LOSS_AGG_MODES)
    grad_clip: float = opt(1.0, "gradient-norm clipping threshold")
    ulysses_sequence_parallel_size: int = opt(1, "Ulysses sequence-parallel group size (fsdp2)")
    model: CriticModelConfig = section(CriticModelConfig)
    megatron: McoreEngineConfig = section(McoreEngineConfig)
    optim: OptimizerConfig = section(OptimizerConfig, lr=1e-5)
    checkpoint: CheckpointConfig = section(CheckpointConfig)


@dataclass
class RewardModelModelConfig:
    """The reward model's weights."""

    path: str | None = opt(None, "a sequence-classification model directory")
    input_tokenizer: str | None = opt(ref("actor_rollout_ref.model.path"), "the policy's tokenizer, to re-render responses")
    external_lib: str | None = opt(None, "a module imported before the model is built")
    trust_remote_code: bool = opt(False, "allow the model's own code")
    use_remove_padding: bool = opt(False, "pack the real tokens of a micro-batch in each forward")
    fsdp_config: FSDPEngineConfig = section(FrozenFSDPEngineConfig)


@dataclass
class RewardModelConfig:
    """A model reward on its own FSDP worker."""

    READ_WHEN: ClassVar[Gate] = when(".enable")
    OPENS: ClassVar[tuple[str, ...]] = ("enable",)

    enable: bool = opt(False, "score with a reward model")
    enable_resource_pool: bool = opt(False, "true: the RM gets its own pool of nnodes x n_gpus_per_node workers")
    n_gpus_per_node: int = opt(8, "workers per node of the RM's own pool")
    nnodes: int = opt(0, "nodes of the RM's own pool")
    strategy: str = opt(ref(f"{_ACTOR}.strategy"), "training engine (fsdp2 | fsdp)", choices=STRATEGIES)
    micro_batch_size_per_gpu: int | None = opt(None, "sequences per worker per reward-model forward")
    max_length: int | None = opt(None, "longest input (longer ones are truncated)")
    use_dynamic_bsz: bool = opt(ref(f"{_ACTOR}.use_dynamic_bsz"), "micro-batches by a token budget")
    forward_max_token_len_per_gpu: int = opt(ref("critic.forward_max_token_len_per_gpu"), "tokens per forward micro-batch")
    model: RewardModelModelConfig = section(RewardModelModelConfig)
