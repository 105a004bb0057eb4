"""Validate the trainer config once, up front, and derive (never write back) the sizes the run uses.

`validate_config` collects every problem and raises one `ConfigError` that explains each in the user's
terms (prompts vs trajectories vs workers), then makes the config read-only. Derived values come from
plain functions (`world_size`, `resolve_device`, `use_critic`, ...) so what the user set stays untouched.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

from omegaconf import DictConfig, OmegaConf

from verl.trainer.config.derived import (
    resolve_device,
    trajectories_per_step,
    use_critic,
    use_reference_policy,
    world_size,
)
from verl.trainer.config.distillation import check_distillation
from verl.trainer.config.fields import ConfigError, field_problems, one_of
from verl.trainer.config.installed import check_installed
from verl.trainer.config.lora import check_lora
from verl.trainer.config.megatron import check_megatron, data_parallel_size
from verl.trainer.config.rewards import check_reward, check_reward_scheduling
from verl.trainer.config.scaling import check_scaling

# Estimators whose baseline is the group of n samples: with n == 1 every advantage is 0.
GROUP_ESTIMATORS = ("grpo", "grpo_vectorized", "rloo", "rloo_vectorized", "grpo_passk", "opo", "gpg")


# ------------------------------------------------------------------------------------------ validate
def validate_config(cfg: DictConfig) -> None:
    """Check the whole config; raise one `ConfigError` listing every problem; then make ``cfg`` read-only.

    Warnings (legal but probably unintended settings) go through `warnings.warn`.
    """
    problems = field_problems(cfg)
    _check_required(cfg, problems)
    _check_sizes(cfg, problems)
    _check_algorithm(cfg, problems)
    _check_trainer(cfg, problems)
    check_reward_scheduling(cfg, problems)
    check_scaling(cfg, problems, world_size(cfg), use_critic(cfg), _reference_runs(cfg))
    check_installed(cfg, problems)
    _check_tool_call_format(cfg, problems)
    if cfg.actor_rollout_ref.model.custom_chat_template is not None and cfg.actor_rollout_ref.rollout.multi_turn.enable:
        problems.append(
            "actor_rollout_ref.model.custom_chat_template applies to the driver's tokenizer (single-turn prompts); "
            "multi-turn agent loops render with the model's own template: save the template in the model's "
            "tokenizer_config.json instead"
        )
    check_lora(cfg, problems)
    check_distillation(cfg, problems, _distillation_loss_settings)
    if "megatron" in (cfg.actor_rollout_ref.actor.strategy, cfg.actor_rollout_ref.ref.strategy, cfg.critic.strategy):
        on_cpu = resolve_device(cfg) == "cpu"
        check_megatron(cfg, problems, world_size(cfg), use_critic(cfg), on_cpu)
    if problems:
        raise ConfigError(problems)
    OmegaConf.set_readonly(cfg, True)


def _check_required(cfg: DictConfig, problems: list[str]) -> None:
    if not cfg.data.train_files:
        problems.append("data.train_files is required: a parquet/jsonl path or a list of them")
    if not cfg.actor_rollout_ref.model.path:
        problems.append("actor_rollout_ref.model.path is required: a Hugging Face model directory")
    if use_critic(cfg) and not cfg.critic.model.path:
        problems.append(
            "critic.model.path is required when the critic is on (adv_estimator=gae or critic.enable=true)"
        )
    rm = cfg.reward.reward_model
    if rm.enable and not rm.model.path:
        problems.append("reward.reward_model.model.path is required when reward.reward_model.enable=true")
    if rm.enable and rm.enable_resource_pool and (rm.nnodes < 1 or rm.n_gpus_per_node < 1):
        problems.append(
            f"reward.reward_model.enable_resource_pool=true needs nnodes >= 1 and n_gpus_per_node >= 1 (the RM's own "
            f"pool), got nnodes={rm.nnodes}, n_gpus_per_node={rm.n_gpus_per_node}"
        )
    if cfg.trainer.resume_mode == "resume_path" and not cfg.trainer.resume_from_path:
        problems.append(
            "trainer.resume_mode=resume_path needs trainer.resume_from_path (a global_step_N directory)"
        )


def _positive(problems: list[str], cfg: DictConfig, key: str) -> bool:
    value = OmegaConf.select(cfg, key)
    if value is None or int(value) <= 0:
        problems.append(f"{key}={value} must be a positive integer")
        return False
    return True


def _check_sizes(cfg: DictConfig, problems: list[str]) -> None:
    data, arr, trainer = cfg.data, cfg.actor_rollout_ref, cfg.trainer
    actor, rollout = arr.actor, arr.rollout
    # the sizes the divisibility checks below divide by (every one is checked, each problem reported)
    ok = all([_positive(problems, cfg, key) for key in (
        "data.train_batch_size", "actor_rollout_ref.rollout.n", "actor_rollout_ref.actor.ppo_mini_batch_size",
        "trainer.nnodes", "trainer.n_gpus_per_node")])  # fmt: skip
    for key in ("data.max_prompt_length", "data.max_response_length", "actor_rollout_ref.actor.ppo_epochs"):
        _positive(problems, cfg, key)
    if data.val_batch_size is not None:
        _positive(problems, cfg, "data.val_batch_size")
    if not ok:
        return
    n, ws = int(rollout.n), world_size(cfg)
    workers = f"trainer.nnodes*n_gpus_per_node={trainer.nnodes}*{trainer.n_gpus_per_node}={ws} workers"
    traj = trajectories_per_step(cfg)
    if traj % ws:
        problems.append(
            f"data.train_batch_size={data.train_batch_size} prompts x actor_rollout_ref.rollout.n={n} = {traj} "
            f"trajectories is not divisible by {workers}; every worker must get the same number of trajectories"
        )
    if cfg.algorithm.filter_groups.enable:
        gen = int(data.gen_batch_size)
        if gen < int(data.train_batch_size):
            problems.append(
                f"data.gen_batch_size={gen} prompts is smaller than data.train_batch_size={data.train_batch_size}: "
                "with algorithm.filter_groups.enable each generation round must offer at least a full batch"
            )
        if (gen * n) % ws:
            problems.append(
                f"data.gen_batch_size={gen} prompts x rollout.n={n} = {gen * n} trajectories is not divisible by {workers}"
            )
    _check_minibatch(problems, "actor_rollout_ref.actor", actor, int(data.train_batch_size), n, ws, workers)
    for key, sub in (("actor_rollout_ref.rollout", rollout), ("actor_rollout_ref.ref", arr.ref)):
        if not sub.log_prob_use_dynamic_bsz:
            _positive(problems, cfg, f"{key}.log_prob_micro_batch_size_per_gpu")
    if rollout.response_length != data.max_response_length:
        problems.append(
            f"actor_rollout_ref.rollout.response_length={rollout.response_length} differs from "
            f"data.max_response_length={data.max_response_length}: responses are generated up to "
            "rollout.response_length and nothing else reads data.max_response_length; set data.max_response_length "
            "(rollout.response_length follows it)"
        )
    for engine in sorted(set(rollout.engine_kwargs) - {rollout.name}):
        options = rollout.engine_kwargs[engine]
        options = OmegaConf.to_container(options, resolve=True) if isinstance(options, DictConfig) else options
        problems.append(
            f"actor_rollout_ref.rollout.engine_kwargs.{engine}={options} are options of the {engine} engine, which "
            f"rollout.name={rollout.name} does not run; remove them or use rollout.name={engine}"
        )
    if rollout.prompt_length < data.max_prompt_length:
        problems.append(
            f"actor_rollout_ref.rollout.prompt_length={rollout.prompt_length} is shorter than "
            f"data.max_prompt_length={data.max_prompt_length}: prompts from the dataset would not fit"
        )
    if actor.use_dynamic_bsz:
        need = int(data.max_prompt_length) + int(data.max_response_length)
        if int(actor.ppo_max_token_len_per_gpu) < need:
            problems.append(
                f"actor_rollout_ref.actor.ppo_max_token_len_per_gpu={actor.ppo_max_token_len_per_gpu} tokens is less than one "
                f"trajectory (data.max_prompt_length + max_response_length = {need}); raise it to at least {need}"
            )
    if use_critic(cfg):
        critic = cfg.critic
        if _positive(problems, cfg, "critic.ppo_mini_batch_size"):
            _check_minibatch(problems, "critic", critic, int(data.train_batch_size), n, ws, workers)
        if not critic.use_dynamic_bsz:
            _positive(problems, cfg, "critic.forward_micro_batch_size_per_gpu")


def _dp(ws: int, workers: str, sec: DictConfig, key: str) -> tuple[int, str]:
    """Data-parallel size of a role and how to name it (Megatron: workers / model-parallel size;
    Ulysses: workers / sp; 0 when that does not divide, which check_megatron / check_scaling report)."""
    sp = int(sec.ulysses_sequence_parallel_size)
    if sp > 1:
        dp = ws // sp if ws % sp == 0 else 0
        return dp, f"{ws} workers / {key}.ulysses_sequence_parallel_size={sp} = {dp} data-parallel ranks"
    dp = data_parallel_size(ws, sec.strategy, sec.megatron)
    if sec.strategy != "megatron" or not dp:
        return dp, workers
    return dp, f"{ws} workers / ({key}.megatron tensor x pipeline x context parallel {ws // dp}) = {dp} data-parallel ranks"


def _check_minibatch(problems: list[str], key: str, sec: DictConfig, train_bs: int, n: int, world: int,
                     all_workers: str) -> None:
    """Mini- and micro-batches of a trained role (actor or critic) against its data-parallel ranks."""
    ws, workers = _dp(world, all_workers, sec, key)
    if not ws:
        return
    mini = int(sec.ppo_mini_batch_size)
    # Upstream splits each step's rows into mini-batches with a shorter last one (DataProto.split) and only
    # asks for train_batch_size >= ppo_mini_batch_size; the fsdp engines do the same. Megatron's pipeline
    # schedule exchanges activations of one fixed micro-batch shape, so there the mini-batch must divide.
    if mini > train_bs:
        problems.append(
            f"{key}.ppo_mini_batch_size={mini} prompts is larger than data.train_batch_size={train_bs} prompts; "
            "a step has at most one mini-batch of the whole batch"
        )
    elif train_bs % mini and sec.strategy == "megatron":
        problems.append(
            f"{key}.ppo_mini_batch_size={mini} prompts does not divide data.train_batch_size={train_bs} prompts; "
            "with strategy=megatron each step must split into whole mini-batches (the pipeline schedule needs "
            f"equal micro-batches; divisors of {train_bs}: {_divisors(train_bs)})"
        )
    if (mini * n) % ws:
        problems.append(
            f"{key}.ppo_mini_batch_size={mini} prompts x actor_rollout_ref.rollout.n={n} = {mini * n} trajectories "
            f"is not divisible by {workers}"
        )
        return
    if sec.use_dynamic_bsz:
        return
    micro = sec.ppo_micro_batch_size_per_gpu
    if micro is None or int(micro) <= 0:
        problems.append(
            f"{key}.ppo_micro_batch_size_per_gpu={micro} must be a positive integer "
            f"(trajectories per worker per forward/backward), or set {key}.use_dynamic_bsz=true"
        )
        return
    per_rank = mini * n // ws
    if per_rank % int(micro):
        problems.append(
            f"{key}.ppo_mini_batch_size={mini} prompts x actor_rollout_ref.rollout.n={n} = {mini * n} trajectories "
            f"/ {workers} = {per_rank} trajectories per worker, not divisible by "
            f"{key}.ppo_micro_batch_size_per_gpu={micro} (divisors of {per_rank}: {_divisors(per_rank)})"
        )


def _divisors(x: int) -> str:
    return ", ".join(str(d) for d in range(1, x + 1) if x % d == 0) if x <= 4096 else "..."


def _check_algorithm(cfg: DictConfig, problems: list[str]) -> None:
    from verl.trainer.ppo.core_algos import get_adv_estimator_fn, get_policy_loss_fn  # recipes fill them too

    algo, actor = cfg.algorithm, cfg.actor_rollout_ref.actor
    est = algo.adv_estimator
    _check_registered(problems, "algorithm.adv_estimator", est, get_adv_estimator_fn)
    _check_registered(problems, "actor_rollout_ref.actor.policy_loss.loss_mode", actor.policy_loss.loss_mode,
                      get_policy_loss_fn)
    clip, low, high = float(actor.clip_ratio), float(actor.clip_ratio_low), float(actor.clip_ratio_high)
    if clip != 0.2 and low != clip and high != clip:  # both sides set apart from it: it reaches no loss
        problems.append(
            f"actor_rollout_ref.actor.clip_ratio={clip} reaches the loss only through clip_ratio_low/high, which "
            f"this config sets to {low}/{high}; leave it at its default (0.2) or drop the sides it should set"
        )
    dro_beta = actor.policy_loss.dro_beta
    if actor.policy_loss.loss_mode == "dro" and (dro_beta is None or float(dro_beta) <= 0):
        problems.append(
            f"actor_rollout_ref.actor.policy_loss.loss_mode=dro needs policy_loss.dro_beta > 0 (the weight of "
            f"its quadratic log-ratio penalty), got {dro_beta}"
        )
    if est == "gae" and cfg.critic.enable is False:
        problems.append(
            "algorithm.adv_estimator=gae needs a value function, but critic.enable=false; "
            "set critic.enable=true (or leave it null) or use a critic-free estimator such as grpo"
        )
    if est != "gae" and cfg.critic.enable:
        warnings.warn(
            f"critic.enable=true with algorithm.adv_estimator={est}: the critic is trained but "
            "its values are not used by this estimator",
            stacklevel=3,
        )
    n = int(cfg.actor_rollout_ref.rollout.n)
    if est in GROUP_ESTIMATORS and n == 1:
        problems.append(
            f"algorithm.adv_estimator={est} compares the rollout.n samples of each prompt, but "
            "actor_rollout_ref.rollout.n=1, so every advantage would be 0; set rollout.n >= 2"
        )
    low, high, c = float(actor.clip_ratio_low), float(actor.clip_ratio_high), float(actor.clip_ratio_c)
    if not 0.0 < low < 1.0:
        problems.append(
            f"actor_rollout_ref.actor.clip_ratio_low={low} must be in (0, 1): the ratio is clipped at 1 - clip_ratio_low"
        )
    if high <= 0.0:
        problems.append(
            f"actor_rollout_ref.actor.clip_ratio_high={high} must be > 0: the ratio is clipped at 1 + clip_ratio_high"
        )
    if c <= 1.0:
        problems.append(
            f"actor_rollout_ref.actor.clip_ratio_c={c} must be > 1 (dual-clip lower bound for negative advantages)"
        )
    if not 0.0 <= float(algo.gamma) <= 1.0:
        problems.append(f"algorithm.gamma={algo.gamma} must be in [0, 1]")
    if not 0.0 <= float(algo.lam) <= 1.0:
        problems.append(f"algorithm.lam={algo.lam} must be in [0, 1]")
    if algo.use_kl_in_reward and actor.use_kl_loss:
        warnings.warn(
            "algorithm.use_kl_in_reward=true and actor_rollout_ref.actor.use_kl_loss=true both penalise "
            "KL to the reference: the penalty is applied twice",
            stacklevel=3,
        )
    if algo.kl_ctrl.type == "adaptive" and (
        float(algo.kl_ctrl.target_kl) <= 0 or int(algo.kl_ctrl.horizon) <= 0
    ):
        problems.append(
            f"algorithm.kl_ctrl.type=adaptive needs target_kl > 0 and horizon > 0, got "
            f"target_kl={algo.kl_ctrl.target_kl}, horizon={algo.kl_ctrl.horizon}"
        )
    if actor.use_rollout_log_probs and not cfg.actor_rollout_ref.rollout.calculate_log_probs:
        problems.append(
            "actor_rollout_ref.actor.use_rollout_log_probs=true takes old_log_probs from the rollout, but "
            "actor_rollout_ref.rollout.calculate_log_probs=false, so the rollout returns none; set "
            "rollout.calculate_log_probs=true (or use_rollout_log_probs=false to recompute them)"
        )
    val_n = cfg.actor_rollout_ref.rollout.val_kwargs.n
    if int(val_n) < 1:
        problems.append(f"actor_rollout_ref.rollout.val_kwargs.n={val_n} must be >= 1")
    if algo.filter_groups.enable and not algo.filter_groups.metric:
        problems.append(
            "algorithm.filter_groups.enable=true needs algorithm.filter_groups.metric (e.g. acc or score)"
        )
    rollout = cfg.actor_rollout_ref.rollout
    if algo.filter_groups.enable and not rollout.do_sample and int(rollout.n) > 1:
        problems.append(
            "actor_rollout_ref.rollout.do_sample=false gives every trajectory of a prompt the same tokens, so "
            "under algorithm.filter_groups.enable=true no group's metric ever varies and generation would never "
            "fill a batch; sample (do_sample=true) or turn dynamic sampling off"
        )
    _check_rollout_correction(cfg, problems)
    check_reward(cfg, problems)


def _check_rollout_correction(cfg: DictConfig, problems: list[str]) -> None:
    rc = cfg.algorithm.rollout_correction
    key = "algorithm.rollout_correction"
    if not float(rc.rollout_is_threshold) > 0:
        problems.append(f"{key}.rollout_is_threshold={rc.rollout_is_threshold} must be > 0 (the weights' upper bound)")
    if rc.bypass_mode and cfg.actor_rollout_ref.actor.use_rollout_log_probs:
        problems.append(
            f"{key}.bypass_mode=true and actor_rollout_ref.actor.use_rollout_log_probs=true both make the rollout's "
            "log-probs the old log-probs; set one of them"
        )
    needs_lp = [k for k in ("rollout_is", "bypass_mode") if rc[k]]
    if needs_lp and not cfg.actor_rollout_ref.rollout.calculate_log_probs:
        problems.append(
            f"{key}.{'/'.join(needs_lp)} compares with the rollout's log-probs, but "
            "actor_rollout_ref.rollout.calculate_log_probs=false; set it to true"
        )


def _check_registered(problems: list[str], key: str, name: str, get: Callable[[str], object]) -> None:
    """Ask core_algos' registry (where recipes register theirs too) whether ``name`` is there, in its words."""
    try:
        get(name)
    except (KeyError, ValueError, NotImplementedError) as e:
        problems.append(f"{key}={name!r}: {e.args[0] if e.args else e}")


def _distillation_loss_settings(name: str) -> object:
    """What the divergence ``name`` needs from a teacher, from core_algos' registry (an unknown name raises)."""
    from verl.trainer.ppo.core_algos import get_distillation_loss_settings

    return get_distillation_loss_settings(name)


def _check_tool_call_format(cfg: DictConfig, problems: list[str]) -> None:
    """``multi_turn.format`` names the agent loops' tool-call format (``verl.registries.TOOL_CALL_FORMATS``,
    filled by verl-agent); an unknown one is refused with the supported ones."""
    mt = cfg.actor_rollout_ref.rollout.multi_turn
    if not mt.enable and mt.format == "hermes":
        return
    from verl.registries import TOOL_CALL_FORMATS

    try:
        TOOL_CALL_FORMATS.get(mt.format)
    except KeyError as e:
        problems.append(f"actor_rollout_ref.rollout.multi_turn.format={mt.format!r}: {e}")


def _check_trainer(cfg: DictConfig, problems: list[str]) -> None:
    trainer = cfg.trainer
    if trainer.total_training_steps is None or int(trainer.total_training_steps) <= 0:
        if int(trainer.total_epochs) <= 0:
            problems.append(
                f"trainer.total_epochs={trainer.total_epochs} must be >= 1 unless trainer.total_training_steps is set"
            )
    for key in ("max_actor_ckpt_to_keep", "max_critic_ckpt_to_keep"):
        value = trainer[key]
        if value is not None and int(value) < 1:
            problems.append(f"trainer.{key}={value} must be >= 1 (or null to keep every checkpoint)")
    if trainer.critic_warmup < 0:
        problems.append(f"trainer.critic_warmup={trainer.critic_warmup} must be >= 0")
    _check_offload_on_cpu(cfg, problems)
    _check_precision(cfg, problems)
    if trainer.worker_backend == "local" and world_size(cfg) != 1:
        problems.append(
            f"trainer.worker_backend=local runs one worker in the driver's process, but "
            f"trainer.nnodes*n_gpus_per_node={trainer.nnodes}*{trainer.n_gpus_per_node}={world_size(cfg)}; "
            "set both to 1 or use trainer.worker_backend=ray"
        )
    if trainer.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            problems.append(
                "trainer.device=cuda but no CUDA device is visible; use trainer.device=cpu (or auto)"
            )


_OFFLOAD_FLAGS = ("param_offload", "optimizer_offload", "offload_policy")


def _check_offload_on_cpu(cfg: DictConfig, problems: list[str]) -> None:
    """Offload moves state from the GPU to host memory; on CPU it already lives there. The engine
    rejects the flags too, but only inside a started worker: say it before Ray starts."""
    flagged = {}
    for where, section in _fsdp_sections(cfg).items():
        on = [flag for flag in _OFFLOAD_FLAGS if bool(section[flag])]
        if on:
            flagged[where] = on
    if not flagged or resolve_device(cfg) != "cpu":  # resolve_device may import torch: only when needed
        return
    for where, on in flagged.items():
        problems.append(
            f"{where}.{'/'.join(on)}=true means nothing on CPU (parameters and optimizer state "
            f"already live in host memory); set them to false for trainer.device=cpu"
        )


def _check_precision(cfg: DictConfig, problems: list[str]) -> None:
    trained = ("actor_rollout_ref.actor.fsdp_config", "critic.model.fsdp_config")
    for where, section in _fsdp_sections(cfg).items():
        problems += fsdp_precision_problems(where, section, trained=where in trained)


def fsdp_precision_problems(where: str, section: DictConfig, trained: bool) -> list[str]:
    """Dtype names of one fsdp_config (``model_dtype``, ``mixed_precision.*``); fp16 compute for a trained
    model needs a loss scaler the engines do not have (a reference, not trained, may run in fp16)."""
    from verl.utils.torch_dtypes import DTYPE_NAMES

    problems: list[str] = []
    mp = section.mixed_precision
    for key, value in (("model_dtype", section.model_dtype), ("mixed_precision.param_dtype", mp.param_dtype),
                       ("mixed_precision.reduce_dtype", mp.reduce_dtype),
                       ("mixed_precision.buffer_dtype", mp.buffer_dtype)):
        names = (*DTYPE_NAMES, "auto") if key == "mixed_precision.param_dtype" else tuple(DTYPE_NAMES)
        one_of(problems, f"{where}.{key}", str(value), names)
    if trained and DTYPE_NAMES.get(str(mp.param_dtype)) == "float16":
        problems.append(
            f"{where}.mixed_precision.param_dtype={mp.param_dtype} trains in fp16, which needs loss scaling "
            "the fsdp engines do not do; use bf16 (fp32 master weights are kept either way)"
        )
    elif trained and str(mp.param_dtype) == "auto" and DTYPE_NAMES.get(str(section.model_dtype)) == "float16":
        # auto computes in model_dtype unless that is fp32 (then bf16 where the device has it)
        problems.append(
            f"{where}.model_dtype={section.model_dtype} with mixed_precision.param_dtype=auto trains in fp16, "
            "which needs loss scaling the fsdp engines do not do; load in fp32 or bf16 (fp32 master weights are "
            "kept either way)"
        )
    return problems


def _reference_runs(cfg: DictConfig) -> bool:
    """The reference runs for a KL term, or always where the schema's reference section has no gate (a
    recipe whose loss needs it: SPIN's DPO)."""
    return use_reference_policy(cfg) or OmegaConf.get_type(cfg.actor_rollout_ref.ref).READ_WHEN is None


def _fsdp_sections(cfg: DictConfig) -> dict[str, DictConfig]:
    """The fsdp_config of every role that runs."""
    arr = cfg.actor_rollout_ref
    sections = {"actor_rollout_ref.actor.fsdp_config": arr.actor.fsdp_config}
    if _reference_runs(cfg):
        sections["actor_rollout_ref.ref.fsdp_config"] = arr.ref.fsdp_config
    if use_critic(cfg):
        sections["critic.model.fsdp_config"] = cfg.critic.model.fsdp_config
    if cfg.reward.reward_model.enable:
        sections["reward.reward_model.model.fsdp_config"] = cfg.reward.reward_model.model.fsdp_config
    return sections
