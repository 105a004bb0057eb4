"""The recipe's config: core's schema plus upstream's ``rollout`` (the rollout pool) and ``async_training``
sections, loaded with core's loader and validated once (core's checks and this recipe's, one error).

Keys added here (upstream's names and defaults unless marked *ours*):

- ``rollout.nnodes`` (1), ``rollout.n_gpus_per_node`` (8): the rollout pool; ``trainer.nnodes`` x
  ``trainer.n_gpus_per_node`` is the trainer pool. On CPU, "gpus" are worker processes.
- ``rollout.total_rollout_steps``: the sample budget in prompts (upstream: 100; here null means
  ``trainer.total_training_steps x data.train_batch_size``, so the budget is never silently capped).
- ``async_training.staleness_threshold`` (0.1), ``trigger_parameter_sync_step`` (4), ``require_batches``
  (1), ``partial_rollout`` (true): see ``message_queue`` for what they bound.
- ``async_training.weight_sync`` (*ours*, ``collective``): ``collective`` (a gloo group spanning both
  pools) or ``object_store`` (Ray's object store; the trainer does not wait for the rollouter).
- ``async_training.partial_rollout_step_tokens`` (*ours*, 4): tokens a wave decodes between two checks
  for new weights (the granularity of a partial-rollout pause; native engine).
- ``async_training.overlap_weight_sync`` (*ours*, false): with ``weight_sync=collective``, the rollout
  pool receives the broadcast in the background as soon as the trainer sends it, while it keeps
  generating, and loads it at its next safe point: the trainer no longer waits for that safe point, at
  the price of one more full copy of the weights on every rollout rank until it is loaded.

Rewards: rule scorers score inline on the rollouter's thread; a discriminative reward model
(``reward.reward_model.enable``, on a pool of its own: ``enable_resource_pool``, ``nnodes`` x
``n_gpus_per_node``) and a generative judge (``reward.reward_kwargs.judge``) score on a thread of their own
as samples arrive (``scoring``).

Rollout engines: ``native`` (waves decoded step by step, pausable), ``hf`` (waves generated whole) and
``vllm`` (``rollout.mode=async``: prompts streamed to vLLM's async engine one by one, samples back as they
finish, ``streaming``). The trainer pool's own rollout only validates; with ``vllm`` it is the native
engine on the actor's live weights (one vLLM engine per rollout rank, none on the trainer pool).

Core keys with a meaning here: ``data.train_batch_size`` is one trainer step (must equal
``require_batches x ppo_mini_batch_size`` prompts), ``data.gen_batch_size`` the prompts the rollout pool
decodes together (a *wave*; with vLLM the most prompts in flight at once), ``actor_rollout_ref.hybrid_engine``
must be false.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from omegaconf import DictConfig, OmegaConf
from verl.trainer.config import (
    ActorRolloutRefConfig,
    DataConfig,
    PPOTrainerConfig,
    TrainerConfig,
    load_config,
    opt,
    ref,
)
from verl.trainer.config.distillation import distillation_enabled
from verl.trainer.recipe_runner import validate_with

from verl_recipe_fully_async.weight_transfer import TRANSPORTS

# engines this recipe can run on the rollout pool; native pauses waves, vllm aborts and resumes requests
ROLLOUT_ENGINES = ("native", "hf", "vllm")
PARTIAL_ROLLOUT_ENGINES = ("native", "vllm")


@dataclass
class RolloutPoolConfig:
    nnodes: int = 1
    n_gpus_per_node: int = 8
    total_rollout_steps: int | None = None


@dataclass
class AsyncTrainingConfig:
    staleness_threshold: float = 0.1
    trigger_parameter_sync_step: int = 4
    require_batches: int = 1
    partial_rollout: bool = True
    weight_sync: str = "collective"
    partial_rollout_step_tokens: int = 4
    overlap_weight_sync: bool = False


@dataclass
class AsyncDataConfig(DataConfig):
    gen_batch_size: int = opt(ref("data.train_batch_size"), "prompts the rollout pool decodes together (a wave)")


@dataclass
class AsyncTrainerSection(TrainerConfig):
    progress_bar: bool = opt(False, "show a progress bar", refused="the asynchronous trainer logs each step; it draws no progress bar")


@dataclass
class AsyncActorRolloutRefConfig(ActorRolloutRefConfig):
    # core refuses false (its loop is colocated); here false is required (`async_problems`)
    hybrid_engine: bool = opt(True, "actor and rollout share workers; false: the rollout on a pool of its own")


@dataclass
class FullyAsyncPPOConfig(PPOTrainerConfig):
    """Core's trainer config plus the rollout pool and the asynchronous-training settings."""

    data: AsyncDataConfig = field(default_factory=AsyncDataConfig)
    actor_rollout_ref: AsyncActorRolloutRefConfig = field(default_factory=AsyncActorRolloutRefConfig)
    trainer: AsyncTrainerSection = field(default_factory=AsyncTrainerSection)
    rollout: RolloutPoolConfig = field(default_factory=RolloutPoolConfig)
    async_training: AsyncTrainingConfig = field(default_factory=AsyncTrainingConfig)


def load_async_config(argv: list[str]) -> DictConfig:
    """Core's loader with this schema (defaults < ``--config`` files < ``key=value``); not validated."""
    return load_config(argv, schema=FullyAsyncPPOConfig)


def trainer_pool_actor_config(cfg: DictConfig) -> DictConfig:
    """``actor_rollout_ref`` for the trainer pool: its rollout only validates, on the actor's live
    weights, so an engine that keeps its own copy (vllm) is replaced by the native one there."""
    arr = cfg.actor_rollout_ref
    if arr.rollout.name != "vllm":
        return arr
    out = OmegaConf.merge(arr, {"rollout": {"name": "native"}})
    OmegaConf.set_readonly(out, True)
    return out


def judge_enabled(cfg: DictConfig) -> bool:
    """A generative judge scores (``reward.reward_kwargs.judge.enable``)."""
    judge = OmegaConf.select(cfg, "reward.reward_kwargs.judge", default=None) or {}
    return bool(judge.get("enable", False))


def scores_off_thread(cfg: DictConfig) -> bool:
    """Rewards that take time (a reward model, a judge) are scored on a thread of their own."""
    return bool(OmegaConf.select(cfg, "reward.reward_model.enable", default=False)) or judge_enabled(cfg)


def rollout_world_size(cfg: DictConfig) -> int:
    return int(cfg.rollout.nnodes) * int(cfg.rollout.n_gpus_per_node)


def samples_per_version(cfg: DictConfig) -> int:
    """W: prompts the trainer consumes between two weight syncs."""
    return int(cfg.async_training.trigger_parameter_sync_step) * int(cfg.data.train_batch_size)


def total_training_steps(cfg: DictConfig) -> int | None:
    """Trainer steps the sample budget buys (None: core derives them from epochs)."""
    if cfg.rollout.total_rollout_steps is not None:
        return int(cfg.rollout.total_rollout_steps) // int(cfg.data.train_batch_size)
    if cfg.trainer.total_training_steps is not None and int(cfg.trainer.total_training_steps) > 0:
        return int(cfg.trainer.total_training_steps)
    return None


def async_problems(cfg: DictConfig) -> list[str]:
    """This recipe's checks (core's run separately), each in the user's terms."""
    p: list[str] = []
    arr, at, data = cfg.actor_rollout_ref, cfg.async_training, cfg.data
    if arr.hybrid_engine:
        p.append(
            "actor_rollout_ref.hybrid_engine=true: this recipe runs the rollout on a pool of its own "
            "(rollout.nnodes x rollout.n_gpus_per_node); set it to false"
        )
    if cfg.trainer.worker_backend != "ray":
        p.append(f"trainer.worker_backend={cfg.trainer.worker_backend}: two resource pools need Ray; use ray")
    if distillation_enabled(cfg):
        p.append(
            "distillation.enabled=true: this recipe starts its own worker pools (rollouter and trainer) and no "
            "teacher pool; run on-policy distillation with main_ppo (verl.trainer.main_ppo)"
        )
    for key in ("nnodes", "n_gpus_per_node"):
        if int(cfg.rollout[key]) < 1:
            p.append(f"rollout.{key}={cfg.rollout[key]} must be >= 1")
    name = arr.rollout.name
    if name not in ROLLOUT_ENGINES:
        p.append(
            f"actor_rollout_ref.rollout.name={name}: this recipe runs {', '.join(ROLLOUT_ENGINES)} on the "
            "rollout pool (sglang's weight transfer and request streaming are not wired here); use vllm or native"
        )
    elif at.partial_rollout and name not in PARTIAL_ROLLOUT_ENGINES:
        p.append(
            f"async_training.partial_rollout=true pauses generations mid-way, which the {name} engine "
            f"cannot; use actor_rollout_ref.rollout.name={' or '.join(PARTIAL_ROLLOUT_ENGINES)} or "
            "partial_rollout=false"
        )
    if name == "vllm" and arr.rollout.mode != "async":
        p.append(
            f"actor_rollout_ref.rollout.mode={arr.rollout.mode}: the rollouter streams prompts to vLLM's async "
            "engine one by one; set rollout.mode=async"
        )
    if arr.rollout.multi_turn.enable and name != "vllm":
        p.append(
            f"actor_rollout_ref.rollout.multi_turn.enable=true with rollout.name={name}: the rollouter runs agent "
            "loops on vLLM's async engine (every turn a request it can pause and resume); use rollout.name=vllm "
            "with rollout.mode=async"
        )
    if at.weight_sync not in TRANSPORTS:
        p.append(f"async_training.weight_sync={at.weight_sync!r} is not one of: {', '.join(TRANSPORTS)}")
    elif at.overlap_weight_sync and at.weight_sync != "collective":
        p.append(
            "async_training.overlap_weight_sync=true overlaps the collective broadcast with generation; "
            f"weight_sync={at.weight_sync} never makes the trainer wait for the rollout pool: set it to false"
        )
    for key in ("trigger_parameter_sync_step", "require_batches", "partial_rollout_step_tokens"):
        if int(at[key]) < 1:
            p.append(f"async_training.{key}={at[key]} must be >= 1")
    s = float(at.staleness_threshold)
    if not 0.0 <= s <= 1.0:
        p.append(
            f"async_training.staleness_threshold={s} must be in [0, 1] (the share of a sync window that "
            "may come from the previous weights; above 1 samples could be more than one sync old)"
        )
    step = int(at.require_batches) * int(arr.actor.ppo_mini_batch_size)
    if int(data.train_batch_size) != step:
        p.append(
            f"data.train_batch_size={data.train_batch_size} must equal async_training.require_batches x "
            f"actor.ppo_mini_batch_size = {at.require_batches} x {arr.actor.ppo_mini_batch_size} = {step} "
            "prompts (what one trainer step consumes)"
        )
    rws = rollout_world_size(cfg)
    if rws >= 1:
        ahead = math.floor(s * samples_per_version(cfg))
        for what, value in (
            ("data.train_batch_size", int(data.train_batch_size)),
            ("data.gen_batch_size", int(data.gen_batch_size)),
            (f"floor(staleness_threshold x {samples_per_version(cfg)})", ahead),
        ):
            if value % rws:
                p.append(
                    f"{what}={value} prompts is not divisible by the {rws} rollout workers "
                    "(every rollout worker generates whole prompt groups)"
                )
    if cfg.rollout.total_rollout_steps is not None:
        budget, tbs = int(cfg.rollout.total_rollout_steps), int(data.train_batch_size)
        if budget < tbs or budget % tbs:
            p.append(
                f"rollout.total_rollout_steps={budget} prompts must be a positive multiple of "
                f"data.train_batch_size={tbs}"
            )
        elif (
            cfg.trainer.total_training_steps is not None
            and int(cfg.trainer.total_training_steps) != budget // tbs
        ):
            p.append(
                f"rollout.total_rollout_steps={budget} gives {budget // tbs} trainer steps but "
                f"trainer.total_training_steps={cfg.trainer.total_training_steps}; set only one of them"
            )
    save = int(cfg.trainer.save_freq)
    if save > 0 and save % int(at.trigger_parameter_sync_step):
        p.append(
            f"trainer.save_freq={save} must be a multiple of async_training.trigger_parameter_sync_step="
            f"{at.trigger_parameter_sync_step}: checkpoints are taken at weight syncs"
        )
    rm = cfg.reward.reward_model
    if rm.enable and not (rm.enable_resource_pool and int(rm.nnodes) >= 1 and int(rm.n_gpus_per_node) >= 1):
        p.append(
            "reward.reward_model.enable=true needs a pool of its own here (reward.reward_model."
            f"enable_resource_pool=true, nnodes >= 1, n_gpus_per_node >= 1; got {rm.enable_resource_pool}, "
            f"{rm.nnodes}, {rm.n_gpus_per_node}): the rollouter scores samples as they arrive, which on the "
            "trainer's pool would wait for its training steps"
        )
    refused = {
        "algorithm.filter_groups.enable": (
            cfg.algorithm.filter_groups.enable,
            "groups stream to the trainer one by one, unfiltered",
        ),
        "reward.launch_reward_fn_async": (
            cfg.reward.launch_reward_fn_async,
            "the rollouter scores every group as it finishes",
        ),
    }
    for key, (on, why) in refused.items():
        if on:
            p.append(f"{key}=true is not supported by this recipe: {why}; set it to false")
    if cfg.algorithm.adv_estimator == "remax":
        p.append(
            "algorithm.adv_estimator=remax needs a greedy rollout next to each sample, which the rollout pool "
            "does not make; use grpo, rloo, reinforce_plus_plus or gae"
        )
    return p


#: Core's validation and this recipe's, as one `ConfigError`; then ``cfg`` is read-only.
validate_async_config = validate_with(async_problems)


__all__ = [
    "AsyncTrainingConfig",
    "FullyAsyncPPOConfig",
    "RolloutPoolConfig",
    "async_problems",
    "judge_enabled",
    "scores_off_thread",
    "load_async_config",
    "rollout_world_size",
    "samples_per_version",
    "total_training_steps",
    "trainer_pool_actor_config",
    "validate_async_config",
]
