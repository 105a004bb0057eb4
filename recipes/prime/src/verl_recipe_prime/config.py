"""PRIME's config: core's typed schema plus upstream's PRIME keys, loaded and validated once.

The recipe extends core's dataclasses (``load_config(schema=...)``, as recipes/sppo and recipes/spin do):
every core key keeps its type, default and validation, and the new keys are typed too, so an unknown or
mistyped key is an error before anything starts. Upstream's recipe puts the PRM under the top-level
``reward_model.*``; here it is core's ``reward.reward_model.*`` (upstream 0.9.1's place for the reward
model), with the same key names below it. Keys (upstream's names and recipe defaults):

- ``data.filter_accuracy`` (true), ``data.accuracy_lower_bound`` (0.2), ``data.accuracy_upper_bound`` (0.8),
  ``data.oversample_factor`` (4.0), ``data.filter_truncate`` (true, upstream's default: a group whose longest
  answer reaches ``max_response_length - 1`` tokens counts as failing; false keeps it by accuracy alone): the
  prompt filter (``filtering``); ``data.gen_batch_size`` defaults to ``train_batch_size * oversample_factor``
  (derived at load); ``data.truncation`` defaults to ``right``, as upstream's ``prime_trainer.yaml`` sets it;
- ``algorithm.reward_gt_coef`` (5), ``algorithm.reward_dpo_coef`` (5): the advantage's weights;
  ``algorithm.adv_estimator`` defaults to ``rloo`` (upstream's recipe) and must be it;
- ``reward.reward_model.{mini_batch_size, prime_granularity, prime_norm}`` and
  ``reward.reward_model.model.{ref_type, update, beta_train, loss_type, optim.*, enable_gradient_checkpointing,
  override_config, model_dtype}``: the implicit PRM; ``model.path`` defaults to the policy's;
- ``reward.reward_model.{enable_resource_pool, nnodes, n_gpus_per_node}`` (upstream 0.9.1's keys): the PRM on
  a pool of its own.

`validate_prime_config` adds what PRIME needs to core's checks and reports every problem at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from omegaconf import DictConfig
from verl.trainer.config import (
    AlgoConfig,
    DataConfig,
    FSDPEngineConfig,
    OptimizerConfig,
    PPOTrainerConfig,
    RewardConfig,
    RewardModelConfig,
    RewardModelModelConfig,
    load_config,
    tokenizer_path,
    world_size,
)
from verl.trainer.recipe_runner import validate_with

from verl_recipe_prime.prime_core_algos import GRANULARITIES, NORMS

UPDATE_STYLES = ("before", "after", "none")
REF_TYPES = ("freeze",)
LOSS_TYPES = ("ce",)
PRM_STRATEGIES = ("fsdp2", "fsdp")


def _ref(key: str) -> Any:
    return "${" + key + "}"


@dataclass
class PRIMEDataConfig(DataConfig):
    # None: derived at load time as train_batch_size * oversample_factor (see load_prime_config)
    gen_batch_size: int | None = None  # type: ignore[assignment]
    filter_accuracy: bool = True
    accuracy_lower_bound: float = 0.2
    accuracy_upper_bound: float = 0.8
    oversample_factor: float = 4.0
    filter_truncate: bool = True
    truncation: str = "right"  # upstream's prime_trainer.yaml


@dataclass
class PRIMEOptimConfig(OptimizerConfig):
    grad_clip: float = 1.0  # upstream keeps the PRM's clip inside its optim section


def _prm_optim() -> PRIMEOptimConfig:
    return PRIMEOptimConfig(lr=1e-6, weight_decay=0.0)


@dataclass
class PRIMERewardModelModelConfig(RewardModelModelConfig):
    path: str | None = _ref("actor_rollout_ref.model.path")  # the PRM starts as the policy/SFT model
    override_config: dict[str, Any] = field(default_factory=dict)
    enable_gradient_checkpointing: bool = _ref("actor_rollout_ref.model.enable_gradient_checkpointing")
    model_dtype: str = _ref("actor_rollout_ref.model.model_dtype")
    fsdp_config: FSDPEngineConfig = field(default_factory=FSDPEngineConfig)  # the PRM is trained: an optimizer
    ref_type: str = "freeze"  # the reference is a frozen copy of the initial PRM
    update: str = "before"  # before: train then score (two forwards); after: score in the training forward
    beta_train: float = 0.05
    loss_type: str = "ce"
    optim: PRIMEOptimConfig = field(default_factory=_prm_optim)


@dataclass
class PRIMERewardModelConfig(RewardModelConfig):
    enable: bool = True
    enable_resource_pool: bool = False
    n_gpus_per_node: int = 8
    nnodes: int = 0
    mini_batch_size: int = _ref("actor_rollout_ref.actor.ppo_mini_batch_size")  # trajectories, as upstream
    prime_granularity: str = "token"
    prime_norm: str = "batch_norm"
    model: PRIMERewardModelModelConfig = field(default_factory=PRIMERewardModelModelConfig)


@dataclass
class PRIMERewardConfig(RewardConfig):
    reward_model: PRIMERewardModelConfig = field(default_factory=PRIMERewardModelConfig)


@dataclass
class PRIMEAlgorithmConfig(AlgoConfig):
    adv_estimator: str = "rloo"
    reward_gt_coef: float = 5.0
    reward_dpo_coef: float = 5.0


@dataclass
class PRIMETrainerConfig(PPOTrainerConfig):
    """Core's root config with the PRIME sections."""

    data: PRIMEDataConfig = field(default_factory=PRIMEDataConfig)
    reward: PRIMERewardConfig = field(default_factory=PRIMERewardConfig)
    algorithm: PRIMEAlgorithmConfig = field(default_factory=PRIMEAlgorithmConfig)


def derived_gen_batch_size(train_batch_size: int, oversample_factor: float) -> int | None:
    """``train_batch_size * oversample_factor`` prompts when that is a whole number, else None."""
    total = float(train_batch_size) * float(oversample_factor)
    return int(round(total)) if abs(total - round(total)) < 1e-9 else None


def load_prime_config(argv: list[str]) -> DictConfig:
    """Core's loader over the PRIME schema (core defaults < ``--config`` files < ``key=value``), with an unset
    ``data.gen_batch_size`` filled in as ``train_batch_size * oversample_factor``. Not yet validated."""
    cfg = load_config(argv, schema=PRIMETrainerConfig)
    if cfg.data.gen_batch_size is None:
        # a default derived from two other keys (an interpolation cannot multiply); validation checks it
        cfg.data.gen_batch_size = derived_gen_batch_size(cfg.data.train_batch_size, cfg.data.oversample_factor)
    return cfg


def prm_world_size(cfg: DictConfig) -> int:
    """Workers of the PRM role: its own pool's, or the shared pool's."""
    rm = cfg.reward.reward_model
    if rm.enable_resource_pool:
        return int(rm.nnodes) * int(rm.n_gpus_per_node)
    return world_size(cfg)


def prime_problems(cfg: DictConfig) -> list[str]:
    """What PRIME needs beyond core's checks, each problem in the user's terms."""
    problems: list[str] = []
    algo, rm = cfg.algorithm, cfg.reward.reward_model
    n = int(cfg.actor_rollout_ref.rollout.n)
    if algo.adv_estimator != "rloo":
        problems.append(
            f"algorithm.adv_estimator={algo.adv_estimator!r}: PRIME's advantage is RLOO over the outcome and the "
            "implicit process rewards (upstream's recipe implements rloo only); set it to rloo"
        )
    if n < 2:
        problems.append(f"actor_rollout_ref.rollout.n={n}: RLOO needs at least 2 answers per prompt")
    if cfg.critic.enable:
        problems.append("critic.enable=true: PRIME has no value model; set critic.enable=false (or null)")
    if algo.use_kl_in_reward:
        problems.append(
            "algorithm.use_kl_in_reward=true: PRIME's advantage is built from the outcome and the implicit "
            "rewards only (upstream's trainer never applies the penalty either); set it to false and use "
            "actor_rollout_ref.actor.use_kl_loss for a KL term"
        )
    if cfg.reward.launch_reward_fn_async:
        problems.append(
            "reward.launch_reward_fn_async=true: PRIME filters on the outcome before the log-prob passes, so the "
            "scores are needed first; set it to false"
        )
    if cfg.algorithm.filter_groups.enable:
        problems.append(
            "algorithm.filter_groups.enable=true is DAPO's filter; PRIME filters with data.filter_accuracy"
        )
    problems += _filter_problems(cfg)
    gt, dpo = float(algo.reward_gt_coef), float(algo.reward_dpo_coef)
    if gt == 0.0 and (dpo == 0.0 or not rm.enable):
        problems.append(
            f"algorithm.reward_gt_coef={gt}, reward_dpo_coef={dpo}, reward.reward_model.enable={rm.enable}: no "
            "reward source left for the advantage"
        )
    if rm.enable:
        problems += _prm_problems(cfg)
    return problems


def _filter_problems(cfg: DictConfig) -> list[str]:
    data = cfg.data
    problems: list[str] = []
    lo, hi, factor = (
        float(data.accuracy_lower_bound),
        float(data.accuracy_upper_bound),
        float(data.oversample_factor),
    )
    if not 0.0 <= lo <= hi <= 1.0:
        problems.append(
            f"data.accuracy_lower_bound={lo}, accuracy_upper_bound={hi}: need 0 <= lower <= upper <= 1"
        )
    if factor < 1.0:
        problems.append(
            f"data.oversample_factor={factor} must be >= 1 (prompts generated per prompt trained on)"
        )
    want = derived_gen_batch_size(data.train_batch_size, factor)
    if want is None:
        problems.append(
            f"data.train_batch_size={data.train_batch_size} x data.oversample_factor={factor} is not a whole number "
            "of prompts to generate; choose values whose product is an integer"
        )
    elif data.gen_batch_size != want:
        problems.append(
            f"data.gen_batch_size={data.gen_batch_size}: PRIME generates train_batch_size {data.train_batch_size} x "
            f"oversample_factor {factor} = {want} prompts per step; leave gen_batch_size unset or set it to {want}"
        )
    return problems


def _prm_problems(cfg: DictConfig) -> list[str]:
    rm = cfg.reward.reward_model
    model = rm.model
    problems: list[str] = []
    if model.ref_type not in REF_TYPES:
        problems.append(
            f"reward.reward_model.model.ref_type={model.ref_type!r}: only freeze (a frozen copy of the initial PRM) "
            "is implemented"
        )
    if model["update"] not in UPDATE_STYLES:  # item access: DictConfig.update is a method
        problems.append(
            f"reward.reward_model.model.update={model['update']!r} is not one of: {', '.join(UPDATE_STYLES)}"
        )
    if model.loss_type not in LOSS_TYPES:
        problems.append(
            f"reward.reward_model.model.loss_type={model.loss_type!r}: only ce is implemented (as upstream)"
        )
    if not float(model.beta_train) > 0:
        problems.append(f"reward.reward_model.model.beta_train={model.beta_train} must be > 0")
    if rm.prime_granularity not in GRANULARITIES:
        problems.append(
            f"reward.reward_model.prime_granularity={rm.prime_granularity!r} is not one of: {', '.join(GRANULARITIES)}"
        )
    if rm.prime_norm not in NORMS:
        problems.append(f"reward.reward_model.prime_norm={rm.prime_norm!r} is not one of: {', '.join(NORMS)}")
    if rm.strategy not in PRM_STRATEGIES:
        problems.append(
            f"reward.reward_model.strategy={rm.strategy!r}: the PRM trains on the FSDP engines; use fsdp2 or fsdp"
        )
    if rm.max_length is not None:
        problems.append(
            f"reward.reward_model.max_length={rm.max_length}: the implicit PRM reads whole prompt + response "
            "sequences token by token; leave it null"
        )
    if not model.path:
        problems.append(
            "reward.reward_model.model.path is not set (by default it is actor_rollout_ref.model.path)"
        )
    policy_tok = tokenizer_path(cfg)
    if model.input_tokenizer is not None and model.input_tokenizer not in (
        policy_tok,
        cfg.actor_rollout_ref.model.path,
    ):
        problems.append(
            f"reward.reward_model.model.input_tokenizer={model.input_tokenizer!r}: the implicit PRM scores the "
            f"policy's own tokens, so it must share the policy's tokenizer ({policy_tok!r}); leave it null"
        )
    if not bool(rm.use_dynamic_bsz) and (
        rm.micro_batch_size_per_gpu is None or int(rm.micro_batch_size_per_gpu) <= 0
    ):
        problems.append(
            f"reward.reward_model.micro_batch_size_per_gpu={rm.micro_batch_size_per_gpu}: the PRM needs rows per "
            "forward (or reward.reward_model.use_dynamic_bsz=true with forward_max_token_len_per_gpu)"
        )
    if rm.enable_resource_pool and (int(rm.nnodes) < 1 or int(rm.n_gpus_per_node) < 1):
        problems.append(
            f"reward.reward_model.enable_resource_pool=true needs nnodes >= 1 and n_gpus_per_node >= 1 "
            f"(got {rm.nnodes} x {rm.n_gpus_per_node})"
        )
    else:
        problems += _prm_size_problems(cfg)
    return problems  # offload flags on CPU: core's validation checks the reward model's fsdp_config


def _prm_size_problems(cfg: DictConfig) -> list[str]:
    rm = cfg.reward.reward_model
    workers = prm_world_size(cfg)
    rows = int(cfg.data.train_batch_size) * int(cfg.actor_rollout_ref.rollout.n)
    mini = int(rm.mini_batch_size)
    problems: list[str] = []
    if mini <= 0 or mini % workers:
        problems.append(
            f"reward.reward_model.mini_batch_size={mini} trajectories must be a positive multiple of the {workers} "
            "PRM workers"
        )
    elif rows % mini:
        problems.append(
            f"reward.reward_model.mini_batch_size={mini} trajectories does not divide a step's data.train_batch_size "
            f"{cfg.data.train_batch_size} x rollout.n {cfg.actor_rollout_ref.rollout.n} = {rows} trajectories"
        )
    return problems


#: Core's validation plus `prime_problems`, in one `ConfigError`; the config is read-only after.
validate_prime_config = validate_with(prime_problems)
