"""Typed schema of the PPO-family trainer config (upstream verl's key names): data, reward, algorithm,
trainer and the root; the role and engine sections are in ``roles.py`` and ``engine.py``.

Every field is declared with `verl.trainer.config.fields.opt` (default, help, choices, refusal): the
packaged ``ppo_trainer.yaml``, ``docs/config-reference.md`` and ``--help`` are generated from it.
Sizes: ``data.train_batch_size`` counts prompts; ``rollout.n`` turns each prompt into n trajectories.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, ClassVar

from verl.trainer.config.distillation import DistillationConfig
from verl.trainer.config.fields import Gate, above, is_set, opt, ref, section, when
from verl.trainer.config.roles import (
    CRITIC_RUNS,
    KL_PENALTY_TYPES,
    OLD_LOG_PROBS,
    ActorRolloutRefConfig,
    CriticConfig,
    RewardModelConfig,
)

_WORKERS_ONLY = "there is no register center to wait for (workers are Ray actors created by the driver)"


@dataclass
class CustomClsConfig:
    """A dataset class of your own."""

    path: str | None = opt(None, "a Python file with a custom dataset class")
    name: str | None = opt(None, "the dataset class's name in that file", when=is_set(".path"))


@dataclass
class DataConfig:
    """The prompts: parquet or jsonl files with the row contract (data_source, prompt = chat messages,
    ability, reward_model.ground_truth, extra_info)."""

    tokenizer: str | None = opt(None, "tokenizer directory for the prompts (default: the model's)")
    train_files: Any = opt(None, "a parquet/jsonl path or a list of them; required", common=True)
    val_files: Any = opt(None, "validation files (null: no validation)", common=True)
    prompt_key: str = opt("prompt", "column holding the chat-message prompt")
    reward_fn_key: str = opt("data_source", "column that picks the scorer (data source)")
    max_prompt_length: int = opt(512, "prompt tokens kept (longer prompts: see truncation)", common=True)
    max_response_length: int = opt(512, "tokens generated per response", common=True)
    train_batch_size: int = opt(1024, "prompts per training step", common=True)
    val_batch_size: int | None = opt(None, "prompts per validation batch (null: the whole validation set)")
    gen_batch_size: int = opt(
        ref("data.train_batch_size"), "prompts generated per round (dynamic sampling)",
        # no switch: the loader draws gen_batch_size prompts per step, so another value without dynamic
        # sampling would train on that many instead of train_batch_size
        when=replace(when("algorithm.filter_groups.enable"), switches=()),
    )
    train_max_samples: int = opt(-1, "use at most this many training rows (-1: all)")
    val_max_samples: int = opt(-1, "use at most this many validation rows (-1: all)")
    return_raw_input_ids: bool = opt(False, "also return the prompt's token ids before left padding")
    return_raw_chat: bool = opt(
        True, "return the prompt's chat messages (raw_prompt)",
        refused="every row carries its chat messages as raw_prompt (agent loops, the reward model's re-rendering "
        "and recipes read them); there is nothing to turn off",
    )
    return_full_prompt: bool = opt(False, "also return the rendered prompt text")
    shuffle: bool = opt(True, "shuffle the training prompts")
    validation_shuffle: bool = opt(False, "shuffle the validation prompts")
    seed: int = opt(ref("trainer.seed"), "seed of the data order")
    filter_overlong_prompts: bool = opt(False, "drop prompts longer than max_prompt_length instead of truncating")
    filter_overlong_prompts_workers: int = opt(
        1, "processes that filter the prompts", refused="prompt filtering runs in the driver's process"
    )
    truncation: str = opt("error", "prompts longer than max_prompt_length", choices=("error", "left", "right", "middle"))
    trust_remote_code: bool = opt(False, "allow the tokenizer's own Python code from its directory")
    dataloader_num_workers: int = opt(0, "DataLoader worker processes for the prompts (upstream: 8)")
    apply_chat_template_kwargs: dict[str, Any] = opt({}, "extra keyword arguments of apply_chat_template (open dict)")
    image_key: str = opt("images", "column of a row's images (bytes, {bytes, path}, paths or PIL)")
    video_key: str = opt("videos", "column of a row's videos (video rows are refused: not supported yet)")
    return_multi_modal_inputs: bool = opt(
        True, "carry pixel_values / image_grid_thw as multi_modal_inputs",
        refused="the engines read an image or video row's pixels from its multi_modal_inputs (without them the "
        "row cannot train, which the dataset reports only once a worker reads it) and a text row has none; "
        "there is nothing to turn off",
    )
    mm_processor_kwargs: dict[str, Any] = opt({}, "min_pixels / max_pixels for qwen_vl_utils.fetch_image (open dict)")
    custom_cls: CustomClsConfig = section(CustomClsConfig)


@dataclass
class CustomRewardFunctionConfig:
    """A reward function of your own: compute_score(data_source, solution_str, ground_truth, extra_info)."""

    path: str | None = opt(None, "a Python file with the reward function", common=True)
    name: str = opt("compute_score", "the function's name in that file", when=is_set(".path"))
    reward_kwargs: dict[str, Any] = opt({}, "keyword arguments of the function (open dict)", when=is_set(".path"))


@dataclass
class OverlongBufferConfig:
    """DAPO's soft overlong penalty."""

    READ_WHEN: ClassVar[Gate] = when(".enable")
    OPENS: ClassVar[tuple[str, ...]] = ("enable",)

    enable: bool = opt(False, "penalise responses near the length limit")
    len: int = opt(0, "tokens before the length limit where the penalty starts")
    penalty_factor: float = opt(1.0, "penalty at the limit")
    log: bool = opt(False, "log the penalty")


#: the sandbox configures the built-in scorer's code rows; a custom reward function runs its own code
_BUILT_IN_SCORER = Gate(
    lambda here: "the built-in scorer runs (reward.custom_reward_function.path is not set)",
    lambda cfg, here: not cfg.reward.custom_reward_function.path,
)  # no switch: a custom function with sandbox options set is the mistake this catches


@dataclass
class RewardConfig:
    """Scoring: rule-based reward managers and scorers (verl-rewards), optional model reward."""

    reward_manager: str = opt("naive", "reward manager from the registry: naive | batch | dapo | prime", common=True)
    reward_kwargs: dict[str, Any] = opt({}, "keyword arguments of the reward manager (open dict)")
    num_examine: int = opt(0, "decoded samples printed per batch")
    launch_reward_fn_async: bool = opt(False, "score in the background while log-probs are computed")
    use_reward_loop: bool = opt(
        False,
        "the reward loop: generate in reward_loop_chunks chunks and score each chunk's samples while the next "
        "generates (upstream: reward_model.use_reward_loop)",
    )
    num_workers: int = opt(8, "reward loop: samples scored at once (driver threads)", when=when(".use_reward_loop"))
    reward_loop_chunks: int = opt(
        4, "reward loop: chunks of whole groups the step's prompts generate in", when=when(".use_reward_loop")
    )
    custom_reward_function: CustomRewardFunctionConfig = section(CustomRewardFunctionConfig)
    sandbox: dict[str, Any] = opt(
        {"name": "local", "timeout": 10.0, "memory_mb": 1024},
        "code sandbox: name local | sandbox_fusion | e2b, plus its options, e.g. +reward.sandbox.url=... (open dict)",
        when=_BUILT_IN_SCORER,
    )
    overlong_buffer: OverlongBufferConfig = section(OverlongBufferConfig)
    reward_model: RewardModelConfig = section(RewardModelConfig)


@dataclass
class KLControlConfig:
    """The KL-in-reward coefficient."""

    READ_WHEN: ClassVar[Gate] = when("..use_kl_in_reward")

    type: str = opt("fixed", "KL controller", choices=("fixed", "adaptive"))
    kl_coef: float = opt(0.001, "KL penalty coefficient (initial value for adaptive)")
    horizon: int = opt(10000, "adaptive KL: steps over which the coefficient adapts", when=when(".type", "adaptive"))
    target_kl: float = opt(0.1, "adaptive KL: target KL", when=when(".type", "adaptive"))


@dataclass
class FilterGroupsConfig:
    """Dynamic sampling (DAPO): drop groups whose metric does not vary."""

    READ_WHEN: ClassVar[Gate] = when(".enable")
    OPENS: ClassVar[tuple[str, ...]] = ("enable",)

    enable: bool = opt(False, "drop groups whose metric has zero spread")
    metric: str | None = opt(None, "per-trajectory metric whose group std must be > 0 (acc, score, seq_reward)")
    max_num_gen_batches: int = opt(0, "generation rounds per step (<= 0: no limit)")


@dataclass
class RolloutCorrectionConfig:
    """Rollout vs training policy (``verl.trainer.ppo.rollout_corr_helper``; upstream's keys)."""

    rollout_is: str | None = opt(
        None, "truncated IS weights pi_old / pi_rollout in the loss: null (off) | token | sequence",
        choices=(None, "token", "sequence"), when=OLD_LOG_PROBS,
    )
    rollout_is_threshold: float = opt(2.0, "upper bound of the weights (TIS)", when=(is_set(".rollout_is"), OLD_LOG_PROBS))
    rollout_rs: str | None = opt(None, "rejection sampling", refused="rejection sampling is not implemented")
    rollout_rs_threshold: float | None = opt(
        None, "rejection-sampling threshold", refused="rejection sampling is not implemented"
    )
    bypass_mode: bool = opt(False, "old_log_probs := rollout_log_probs (no trainer forward)")
    loss_type: str = opt(
        "ppo_clip", "bypass-mode loss",
        refused="only ppo_clip is implemented (the PPO ratio against the rollout policy)",
    )
    rollout_is_batch_normalize: bool = opt(
        False, "divide the weights by their batch mean", when=(is_set(".rollout_is"), OLD_LOG_PROBS)
    )


@dataclass
class AlgoConfig:
    """Advantage estimation and KL control."""

    adv_estimator: str = opt("grpo", "advantage estimator from the registry: gae | grpo | rloo | reinforce_plus_plus | ...", common=True)
    gamma: float = opt(1.0, "discount factor", when=when(".adv_estimator", "gae", "reinforce_plus_plus"))
    lam: float = opt(1.0, "GAE lambda", when=when(".adv_estimator", "gae"))
    norm_adv_by_std_in_grpo: bool = opt(
        True, "GRPO: divide advantages by the group's std (false: Dr. GRPO)",
        when=when(".adv_estimator", "grpo", "grpo_vectorized", "grpo_passk"),
    )
    use_kl_in_reward: bool = opt(False, "subtract a KL-to-reference penalty from the token rewards", common=True)
    kl_penalty: str = opt(
        "kl", "how KL-in-reward is estimated ('+': straight-through)", choices=KL_PENALTY_TYPES,
        when=when(".use_kl_in_reward"),
    )
    kl_ctrl: KLControlConfig = section(KLControlConfig)
    filter_groups: FilterGroupsConfig = section(FilterGroupsConfig)
    rollout_correction: RolloutCorrectionConfig = section(RolloutCorrectionConfig)


LOGGERS = ("console", "jsonl", "tensorboard", "swanlab", "wandb", "mlflow")
DEVICES = ("auto", "cpu", "cuda")
RESUME_MODES = ("auto", "disable", "resume_path")


@dataclass
class TrainerConfig:
    """The driver loop: sizes of the worker groups, logging, checkpoints."""

    device: str = opt("auto", "auto: cuda when available (read it with resolve_device(cfg))", choices=DEVICES, common=True)
    nnodes: int = opt(1, "nodes", common=True)
    n_gpus_per_node: int = opt(8, "workers per node (CPU workers when device is cpu)", common=True)
    logger: list[str] = opt(["console"], "trackers", choices=LOGGERS, common=True)
    project_name: str = opt("verl_examples", "tracker project")
    experiment_name: str = opt("gsm8k", "tracker run name")
    default_local_dir: str = opt(
        "checkpoints/${trainer.project_name}/${trainer.experiment_name}", "output directory: config, metrics, checkpoints", common=True
    )
    total_epochs: int = opt(30, "passes over the training prompts", common=True)
    total_training_steps: int | None = opt(None, "stop after this many steps (null: epochs x batches)", common=True)
    save_freq: int = opt(-1, "checkpoint every N steps (-1: never)", common=True)
    test_freq: int = opt(-1, "validate every N steps (-1: never)", common=True)
    val_before_train: bool = opt(True, "validate once before training")
    val_only: bool = opt(False, "only validate, then exit", when=when(".val_before_train"))
    critic_warmup: int = opt(0, "steps that train only the critic", when=CRITIC_RUNS)
    resume_mode: str = opt("auto", "resume from the newest checkpoint, never, or resume_from_path", choices=RESUME_MODES)
    resume_from_path: str | None = opt(
        None, "checkpoint directory (global_step_N) for resume_mode=resume_path", when=when(".resume_mode", "resume_path")
    )
    del_local_ckpt_after_load: bool = opt(
        False, "delete the local checkpoint after resuming from it",
        refused="checkpoints are never deleted after a resume; keep at most N with trainer.max_actor_ckpt_to_keep",
    )
    max_actor_ckpt_to_keep: int | None = opt(None, "keep the newest N actor checkpoints (null: all)", when=above(".save_freq", 0))
    max_critic_ckpt_to_keep: int | None = opt(
        None, "keep the newest N critic checkpoints (null: all)", when=(above(".save_freq", 0), CRITIC_RUNS)
    )
    balance_batch: bool = opt(True, "reorder trajectories so every worker gets a similar token count")
    worker_backend: str = opt(
        "ray", "ray: workers are Ray processes; local: one worker (nnodes * n_gpus_per_node = 1) in the driver",
        choices=("ray", "local"), common=True,
    )
    log_val_generations: int = opt(0, "validation samples logged to the trackers as a table")
    rollout_data_dir: str | None = opt(None, "write each step's prompts, responses and scores as JSONL here")
    validation_data_dir: str | None = opt(None, "write the validation generations as JSONL here")
    ray_wait_register_center_timeout: int = opt(300, "seconds to wait for the register center", refused=_WORKERS_ONLY)
    seed: int = opt(1, "the driver, every worker (seed + rank) and, through data.seed, the data order")
    progress_bar: bool = opt(True, "show a progress bar")


@dataclass
class RayKwargsConfig:
    """Passed to ray.init."""

    ray_init: dict[str, Any] = opt({"num_cpus": None}, "keyword arguments of ray.init (open dict)")
    timeline_json_file: str | None = opt(None, "write Ray's task timeline (Chrome trace) here at the end of the run")


@dataclass
class PPOTrainerConfig:
    """Root of the config that ``python -m verl.trainer.main_ppo`` reads."""

    data: DataConfig = section(DataConfig)
    actor_rollout_ref: ActorRolloutRefConfig = section(ActorRolloutRefConfig)
    critic: CriticConfig = section(CriticConfig)
    reward: RewardConfig = section(RewardConfig)
    algorithm: AlgoConfig = section(AlgoConfig)
    trainer: TrainerConfig = section(TrainerConfig)
    ray_kwargs: RayKwargsConfig = section(RayKwargsConfig, when=when("trainer.worker_backend", "ray"))
    distillation: DistillationConfig = section(DistillationConfig)
