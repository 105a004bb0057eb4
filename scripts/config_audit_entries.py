"""What `config_audit` runs for ``main_ppo`` (its CPU default, shortened, and its groups) and the probe values
(the recipes' entries: `config_audit_recipes`).

A group is a context (``key=value`` settings that open gates, e.g. ``algorithm.adv_estimator=gae`` for the
critic's keys) and the keys probed in it (fnmatch patterns over the schema's keys). Every entry's ``base``
group probes every key in the CPU default's own context. Values: `value_for` generates one from the field
(another choice, the other bool, a changed number); `VALUES` holds the hand-picked ones where a generated
value would not make a valid one-step run (sizes, paths, names); `NOT_PROBED` the keys every run needs as
the audit sets them (they are still checked: each is set to a non-default value and must be read).
"""

from __future__ import annotations

import fnmatch
import functools
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

NO_VALUE = object()


@dataclass
class Group:
    name: str
    context: list[str] = field(default_factory=list)
    keys: tuple[str, ...] = ("*",)
    values: dict[str, Any] = field(default_factory=dict)  # this group's own values (over VALUES)
    skip: tuple[str, ...] = ()  # patterns not probed here (probed in another group)


@dataclass
class Entry:
    name: str
    target: str  # module:function run as the entry point (argv list)
    schema_path: str  # module:class of the entry's config schema (or a recipe's ``RECIPE.schema``)
    check: Callable[[list[str]], Any]  # argv -> the validated config the entry point would run with
    base: list[str]
    groups: list[Group]
    assets: Callable[[Path], list[str]] | None = None

    @property
    def schema(self) -> type:
        from config_audit import resolve
        from verl.trainer.config import PPOTrainerConfig

        return resolve(self.schema_path) or PPOTrainerConfig  # a recipe without keys of its own: core's


def main_check(argv: list[str]) -> Any:
    from verl.trainer.main_ppo import checked_config

    return checked_config(argv)


# ------------------------------------------------------------------------------------------------ values
#: keys every run sets itself (paths to the assets, the run's length and directory, the device, workers)
NOT_PROBED = (
    "data.train_files", "data.val_files", "actor_rollout_ref.model.path", "trainer.default_local_dir",
    "trainer.total_training_steps", "trainer.total_epochs", "trainer.device", "trainer.nnodes",
    "trainer.n_gpus_per_node", "trainer.worker_backend", "trainer.resume_mode", "ray_kwargs.ray_init",
    "ray_kwargs.ray_init.*", "data.train_batch_size", "actor_rollout_ref.rollout.n",
    "actor_rollout_ref.actor.ppo_mini_batch_size", "data.max_prompt_length", "data.max_response_length",
    "actor_rollout_ref.model.tokenizer_path", "data.tokenizer",
)

#: keys that change what a run does as a whole (val_only: validate, then stop): never probed beside others,
#: only set as a group's context (main_ppo's val_only group)
ALONE = ("trainer.val_only",)

#: hand-picked non-default values (a one-step run on the tiny model stays valid with each)
VALUES: dict[str, Any] = {
    "data.prompt_key": "prompt",  # the data's column: a different name would not load
    "data.val_batch_size": 8,
    "data.gen_batch_size": 32,
    "data.train_max_samples": 64,
    "data.val_max_samples": 8,
    "data.dataloader_num_workers": 1,
    "data.apply_chat_template_kwargs.audit_kwarg": True,
    "data.image_key": "pictures",
    "data.video_key": "clips",
    "data.mm_processor_kwargs.max_pixels": 4096,
    "data.custom_cls.path": NO_VALUE,
    "data.custom_cls.name": NO_VALUE,
    "data.truncation": "left",
    "data.seed": 7,
    "actor_rollout_ref.model.custom_chat_template": (
        "{% for m in messages %}{{ m['role'] }}:{{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}assistant:{% endif %}"
    ),
    "actor_rollout_ref.model.external_lib": "json",
    "actor_rollout_ref.model.override_config.attention_dropout": 0.0,
    "actor_rollout_ref.model.model_dtype": "bfloat16",
    "actor_rollout_ref.model.lora_adapter_path": NO_VALUE,
    "actor_rollout_ref.model.target_modules": ["q_proj", "v_proj"],
    "actor_rollout_ref.model.exclude_modules": "down_proj",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 64,
    "actor_rollout_ref.actor.ppo_max_token_len_per_gpu": 4096,
    "actor_rollout_ref.actor.clip_ratio_c": 4.0,
    "actor_rollout_ref.actor.optim.betas": [0.9, 0.99],
    "actor_rollout_ref.actor.optim.lr_warmup_steps": 2,
    "actor_rollout_ref.actor.optim.lr": 5e-5,
    "actor_rollout_ref.actor.checkpoint.save_contents": ["model", "optimizer", "extra", "hf_model"],
    "actor_rollout_ref.actor.checkpoint.load_contents": ["model", "optimizer"],
    "actor_rollout_ref.actor.fsdp_config.model_dtype": "bfloat16",
    "actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype": "bf16",
    "actor_rollout_ref.actor.fsdp_config.mixed_precision.reduce_dtype": "bf16",
    "actor_rollout_ref.actor.fsdp_config.mixed_precision.buffer_dtype": "bf16",
    "actor_rollout_ref.actor.fsdp_config.fsdp_size": 1,
    "actor_rollout_ref.actor.policy_loss.dro_beta": 0.5,
    "actor_rollout_ref.actor.ulysses_sequence_parallel_size": 2,
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": 64,
    "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu": 4096,
    "actor_rollout_ref.ref.fsdp_config.model_dtype": "bfloat16",
    "actor_rollout_ref.ref.fsdp_config.mixed_precision.param_dtype": "bf16",
    "actor_rollout_ref.ref.fsdp_config.mixed_precision.reduce_dtype": "bf16",
    "actor_rollout_ref.ref.fsdp_config.mixed_precision.buffer_dtype": "bf16",
    "actor_rollout_ref.ref.fsdp_config.fsdp_size": 1,
    "actor_rollout_ref.ref.ulysses_sequence_parallel_size": 2,
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": 64,
    "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu": 4096,
    "actor_rollout_ref.rollout.prompt_length": 40,
    "actor_rollout_ref.rollout.response_length": 5,
    "actor_rollout_ref.rollout.micro_batch_size": 32,
    "actor_rollout_ref.rollout.dtype": "float16",
    "actor_rollout_ref.rollout.load_format": "auto",
    "actor_rollout_ref.rollout.max_model_len": 64,
    "actor_rollout_ref.rollout.engine_kwargs.vllm.swap_space": 1,
    "actor_rollout_ref.rollout.val_kwargs.n": 2,
    "actor_rollout_ref.rollout.top_k": 20,
    "actor_rollout_ref.rollout.top_p": 0.9,
    "actor_rollout_ref.rollout.temperature": 0.9,
    "actor_rollout_ref.rollout.multi_turn.max_assistant_turns": 2,
    "actor_rollout_ref.rollout.multi_turn.max_user_turns": 1,
    "actor_rollout_ref.rollout.multi_turn.max_parallel_calls": 2,
    "actor_rollout_ref.rollout.multi_turn.tool_config_path": NO_VALUE,
    "actor_rollout_ref.rollout.multi_turn.function_tool_path": NO_VALUE,
    "actor_rollout_ref.rollout.multi_turn.interaction_config_path": NO_VALUE,
    "actor_rollout_ref.rollout.multi_turn.format": "hermes",
    "actor_rollout_ref.rollout.agent.default_agent_loop": NO_VALUE,
    "actor_rollout_ref.rollout.agent.num_workers": 2,
    "actor_rollout_ref.rollout.agent.agent_loop_config_path": NO_VALUE,
    "critic.model.path": NO_VALUE,
    "critic.model.tokenizer_path": NO_VALUE,
    "critic.model.external_lib": "json",
    "critic.model.override_config.attention_dropout": 0.0,
    "critic.model.model_dtype": "bfloat16",
    "critic.model.fsdp_config.model_dtype": "bfloat16",
    "critic.model.fsdp_config.mixed_precision.param_dtype": "bf16",
    "critic.model.fsdp_config.mixed_precision.reduce_dtype": "bf16",
    "critic.model.fsdp_config.mixed_precision.buffer_dtype": "bf16",
    "critic.model.fsdp_config.fsdp_size": 1,
    "critic.ppo_micro_batch_size_per_gpu": 64,
    "critic.forward_micro_batch_size_per_gpu": 32,
    "critic.ppo_max_token_len_per_gpu": 4096,
    "critic.forward_max_token_len_per_gpu": 2048,
    "critic.ppo_mini_batch_size": 8,
    "critic.rollout_n": NO_VALUE,
    "critic.optim.betas": [0.9, 0.99],
    "critic.optim.lr_warmup_steps": 2,
    "critic.checkpoint.save_contents": ["model", "optimizer", "extra", "hf_model"],
    "critic.checkpoint.load_contents": ["model", "optimizer"],
    "critic.ulysses_sequence_parallel_size": 2,
    "reward.reward_manager": "batch",
    "reward.reward_kwargs.count_errors_as_zero": True,
    "reward.custom_reward_function.path": NO_VALUE,
    "reward.custom_reward_function.name": NO_VALUE,
    "reward.custom_reward_function.reward_kwargs.audit_kwarg": 1,
    "reward.sandbox.timeout": 5.0,
    "reward.sandbox.memory_mb": 512,
    "reward.sandbox.name": NO_VALUE,
    "reward.overlong_buffer.len": 2,
    "reward.reward_model.model.path": NO_VALUE,
    "reward.reward_model.model.input_tokenizer": NO_VALUE,
    "reward.reward_model.model.external_lib": "json",
    "reward.reward_model.n_gpus_per_node": 1,
    "reward.reward_model.nnodes": 1,
    "reward.reward_model.micro_batch_size_per_gpu": 8,
    "reward.reward_model.max_length": 64,
    "reward.reward_model.forward_max_token_len_per_gpu": 2048,
    "reward.reward_model.model.fsdp_config.model_dtype": "bfloat16",
    "reward.reward_model.model.fsdp_config.mixed_precision.param_dtype": "bf16",
    "reward.reward_model.model.fsdp_config.mixed_precision.reduce_dtype": "bf16",
    "reward.reward_model.model.fsdp_config.mixed_precision.buffer_dtype": "bf16",
    "reward.reward_model.model.fsdp_config.fsdp_size": 1,
    "algorithm.adv_estimator": "rloo",
    "algorithm.gamma": 0.9,
    "algorithm.lam": 0.9,
    "algorithm.filter_groups.metric": "acc",
    "algorithm.filter_groups.max_num_gen_batches": 3,
    "algorithm.rollout_correction.rollout_is_threshold": 3.0,
    "algorithm.kl_ctrl.horizon": 100,
    "trainer.logger": ["console", "jsonl"],
    "trainer.project_name": "audit",
    "trainer.experiment_name": "audit_run",
    "trainer.save_freq": 1,
    "trainer.test_freq": 1,
    "trainer.resume_from_path": NO_VALUE,
    "trainer.max_actor_ckpt_to_keep": 1,
    "trainer.max_critic_ckpt_to_keep": 1,
    "trainer.critic_warmup": 1,
    "trainer.log_val_generations": 2,
    "trainer.rollout_data_dir": "rollout_dump",
    "trainer.validation_data_dir": "validation_dump",
    "trainer.seed": 3,
    "ray_kwargs.timeline_json_file": "timeline.json",
}


def _changed_number(default: Any, kind: str) -> Any:
    if kind == "int":
        return 2 if default in (None, 0, -1, 1) else int(default) * 2
    return 0.5 if default in (None, 0, 0.0) else float(default) / 2


def value_for(key: str, info: Any, group: Group) -> Any:
    """A valid non-default value for the key, or NO_VALUE (then the key is not probed)."""
    if key in group.values:
        return group.values[key]
    if key in VALUES:
        return VALUES[key]
    default, kind = info.default, info.type
    if isinstance(default, str) and "${" in default:
        return NO_VALUE  # follows another key: probed through that key
    if info.choices:
        other = [c for c in info.choices if c != default and c is not None]
        if kind.startswith("list"):
            return [other[0]] if other else NO_VALUE
        return other[0] if other else NO_VALUE
    if kind.startswith("bool"):
        return not default if isinstance(default, bool) else True
    if kind.startswith("int"):
        return _changed_number(default, "int")
    if kind.startswith("float"):
        return _changed_number(default, "float")
    return NO_VALUE


def group_settings(entry: Entry, group: Group) -> dict[str, Any]:
    """{key: value} probed in ``group``: the schema's keys (and the open-dict keys of `VALUES`) that match
    its patterns, minus those the CPU default's runs set themselves and those the context sets."""
    from verl.trainer.config import schema_fields

    fields = schema_fields(entry.schema)
    # the keys gates test (their switches) are set only as a group's context: probed beside the keys they
    # gate, a switch set to shut its gate would make the config itself say "off" (accepted, not read)
    context = {s.split("=", 1)[0].lstrip("+~") for s in group.context} | switches(entry.schema)
    extra = [k for k in {**VALUES, **group.values} if k not in fields and any(k.startswith(f + ".") for f in fields)]
    out = {}
    for key in [*fields, *extra]:
        if not any(fnmatch.fnmatchcase(key, p) for p in group.keys):
            continue
        if any(fnmatch.fnmatchcase(key, p) for p in (*NOT_PROBED, *ALONE, *group.skip)) or key in context:
            continue
        info = fields.get(key)
        value = value_for(key, info, group) if info is not None else {**VALUES, **group.values}[key]
        if value is not NO_VALUE and (info is None or info.open or value != info.default):
            out[key] = value
    return out


@functools.cache
def switches(schema: type) -> frozenset[str]:
    """Every key some gate of ``schema`` tests (`verl.trainer.config.fields.Gate.switches`)."""
    from verl.trainer.config import schema_fields
    from verl.trainer.config.fields import absolute

    return frozenset(absolute(here, k) for info in schema_fields(schema).values() for g, here in info.gates
                     for k in g.switches)


def override(key: str, value: Any) -> str:
    """``key=value`` in Hydra's grammar (``++`` adds a key inside an open dict)."""
    from verl.trainer.config import PPOTrainerConfig, schema_fields

    text = json.dumps(value) if not isinstance(value, str) else _quote(value)
    prefix = "" if key in schema_fields(PPOTrainerConfig) else "++"
    return f"{prefix}{key}={text}"


def _quote(s: str) -> str:
    if s and all(c.isalnum() or c in "_-./:" for c in s) and s not in ("true", "false", "null"):
        return s
    return "'" + s.replace("\\", "\\\\").replace("'", "\\'") + "'"


# -------------------------------------------------------------------------------------------- assets
@functools.cache
def demo_assets(root: Path) -> tuple[str, str, str]:
    """Core's addition task and its random-init tiny Qwen2 (no warm start: the audit checks reads)."""
    from verl.trainer import demo

    root.mkdir(parents=True, exist_ok=True)
    model = root / "tiny_qwen2"
    data = {"train": str(root / "data" / "train.parquet"), "test": str(root / "data" / "test.parquet")}
    if not Path(data["test"]).is_file():
        data = demo.write_data(root / "data")
    if not (model / "config.json").is_file():
        demo.build_model(model)
    return data["train"], data["test"], str(model)


def demo_asset_overrides(root: Path) -> list[str]:
    train, test, model = demo_assets(root)
    return [f"data.train_files={train}", f"data.val_files={test}", f"actor_rollout_ref.model.path={model}"]


AUDIT_FILES = {
    "reward_fn.py": (
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None, audit_kwarg=0, **kwargs):\n"
        "    return float(solution_str.strip() == str(ground_truth))\n"
    ),
    "dataset_cls.py": (
        "from verl.utils.dataset.rl_dataset import RLHFDataset\n\n\nclass AuditDataset(RLHFDataset):\n"
        "    pass\n"
    ),
    "tools.yaml": "tools:\n  - class_name: verl.agent.examples.tool_arithmetic.CalculatorTool\n",
    # a score whose parity differs between the sampled texts of one prompt, so dynamic sampling keeps most
    # groups of the random-init model (every exact-match score is 0 there: every group would be dropped)
    "varied_reward.py": (
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):\n"
        "    acc = float(sum(map(ord, solution_str)) % 2)\n"
        "    return {'score': acc, 'acc': acc}\n"
    ),
    "function_tools.py": (
        "from verl.tools.function_tool import function_tool\n\n\n@function_tool\n"
        "def add(a: int, b: int) -> int:\n    \"\"\"Add two integers.\n\n    Args:\n        a: the first\n"
        "        b: the second\n    \"\"\"\n    return a + b\n"
    ),
}


def audit_files(root: Path) -> dict[str, str]:
    """Small files some keys name (a reward function, a dataset class, tool configs): {name: path}."""
    root.mkdir(parents=True, exist_ok=True)
    for name, text in AUDIT_FILES.items():
        (root / name).write_text(text)
    return {name: str(root / name) for name in AUDIT_FILES}


@functools.cache
def reward_model(root: Path) -> str:
    """A random-init tiny Qwen2 sequence classifier with the demo model's tokenizer."""
    import torch
    import transformers
    from verl.workers.tiny import tiny_qwen2_config
    from verl.workers.tokenizer import hf_tokenizer

    out = root / "tiny_rm"
    if not (out / "config.json").is_file():
        tok = hf_tokenizer(demo_assets(root)[2])
        config = tiny_qwen2_config("xs", vocab_size=len(tok))
        config.num_labels, config.pad_token_id = 1, tok.pad_token_id
        torch.manual_seed(0)
        transformers.Qwen2ForSequenceClassification(config).save_pretrained(out)
        tok.save_pretrained(out)
    return str(out)


def main_assets(root: Path) -> list[str]:
    audit_files(root / "files")
    reward_model(root)
    return demo_asset_overrides(root)


# ------------------------------------------------------------------------------------------- entries
#: main_ppo's CPU default (``verl.trainer.demo.rl_args``: GRPO on the addition task), one worker, one step
MAIN_BASE = [  # the demo's keys that hold their defaults (use_kl_loss=false, ...) left out: they are gates' switches
    "data.max_prompt_length=32", "data.max_response_length=6", "data.train_batch_size=16",
    "actor_rollout_ref.rollout.n=8",
    "actor_rollout_ref.actor.ppo_mini_batch_size=16", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=128",
    "actor_rollout_ref.actor.optim.lr=1e-4",
    "actor_rollout_ref.actor.optim.weight_decay=0.0", "actor_rollout_ref.model.enable_gradient_checkpointing=false",
    "actor_rollout_ref.rollout.calculate_log_probs=true", "actor_rollout_ref.actor.use_rollout_log_probs=true",
    "trainer.device=cpu", "trainer.nnodes=1", "trainer.n_gpus_per_node=1", "trainer.total_training_steps=1",
    "trainer.test_freq=10",
    "trainer.logger=[jsonl,tensorboard]", "trainer.project_name=verl_demo", "trainer.experiment_name=grpo_arithmetic",
    "trainer.resume_mode=disable", "trainer.progress_bar=true", "data.val_max_samples=8",
]
_A = "actor_rollout_ref.actor"
_R = "actor_rollout_ref.rollout"
_OLD_LOG_PROBS = [f"{_A}.use_rollout_log_probs=false"]  # the actor computes the old log-probs

_SIZES = ("*.megatron.*", "*ulysses*", "*fsdp_size", "*reshard_after_forward")  # probed with more workers
_KL_RUN = "kl_checkpoint_cosine_clip_cov"

MAIN_GROUPS = [
    Group("base", skip=(*_SIZES, f"{_A}.freeze_vision_tower")),  # a text model here (probed in vlm_count)
    # a run that only validates reads no training setting (as upstream's): the base's training keys at defaults
    Group("val_only", context=["trainer.val_only=true", f"{_A}.ppo_micro_batch_size_per_gpu=4", "trainer.test_freq=-1"],
          keys=()),
    Group(
        "distillation",  # on-policy distillation: the demo model as its own teacher on a pool of one worker
        context=["distillation.enabled=true", "distillation.nnodes=1", "distillation.n_gpus_per_node=1",
                 "distillation.teacher_models.teacher_model.model_path=${actor_rollout_ref.model.path}",
                 "distillation.teacher_models.teacher_model.inference.name=hf",
                 "distillation.teacher_models.teacher_model.inference.tensor_model_parallel_size=1",
                 "distillation.distillation_loss.loss_mode=jsd_topk", "distillation.distillation_loss.use_task_rewards=true"],
        keys=("distillation.distillation_loss.*", "distillation.teacher_key"),
    ),
    Group(
        # core's filter stage (DAPO's dynamic sampling: groups kept by the spread of acc) over the reward loop's
        # scores (each generation round scored in chunks while the next chunk generates)
        "dynamic_sampling_reward_loop",
        context=["algorithm.filter_groups.enable=true", "reward.custom_reward_function.path={assets}/files/varied_reward.py",
                 "reward.use_reward_loop=true"],
        keys=("algorithm.filter_groups.*", "data.gen_batch_size", "reward.num_workers", "reward.reward_loop_chunks"),
        values={"reward.reward_loop_chunks": 2},  # chunks of whole groups: the round's prompts in 2
    ),
    Group(
        _KL_RUN,
        context=[f"{_A}.use_kl_loss=true", "algorithm.use_kl_in_reward=true", *_OLD_LOG_PROBS,
                 "trainer.save_freq=1", f"{_A}.optim.lr_scheduler_type=cosine", f"{_A}.optim.lr_warmup_steps=0",
                 f"{_A}.policy_loss.loss_mode=clip_cov", "algorithm.rollout_correction.rollout_is=token",
                 "algorithm.kl_ctrl.type=adaptive"],
        keys=(f"{_A}.kl_loss_*", "algorithm.kl_*", "actor_rollout_ref.ref.*", "*.checkpoint.*",
              "trainer.max_actor_ckpt_to_keep", f"{_A}.optim.*", f"{_A}.policy_loss.clip_cov_*",
              "algorithm.rollout_correction.*", f"{_R}.log_prob_*"),
        skip=(*_SIZES, f"{_A}.optim.lr"),  # the resume group must find the same learning rate
        values={"trainer.max_actor_ckpt_to_keep": 2},
    ),
    Group(
        "resume",
        context=["trainer.resume_mode=resume_path", f"trainer.resume_from_path={{work}}/main_ppo/{_KL_RUN}/run/global_step_1",
                 "trainer.total_training_steps=2", f"{_A}.use_kl_loss=true", "algorithm.use_kl_in_reward=true",
                 *_OLD_LOG_PROBS, "trainer.save_freq=1", f"{_A}.optim.lr_scheduler_type=cosine",
                 f"{_A}.optim.lr_warmup_steps=0", f"{_A}.policy_loss.loss_mode=clip_cov",
                 "algorithm.rollout_correction.rollout_is=token", "algorithm.kl_ctrl.type=adaptive"],
        keys=("*.checkpoint.load_contents",),
        values={f"{_A}.checkpoint.load_contents": ["model"]},
    ),
    Group(
        "critic_kl_cov_dynamic_bsz",
        context=["algorithm.adv_estimator=gae", "critic.enable=true", "trainer.save_freq=1", "trainer.val_before_train=false",
                 "critic.optim.lr_scheduler_type=cosine", "critic.optim.lr_warmup_steps=0",
                 f"{_A}.policy_loss.loss_mode=kl_cov", f"{_A}.use_dynamic_bsz=true", *_OLD_LOG_PROBS],
        keys=("critic.*", "algorithm.gamma", "algorithm.lam", "trainer.critic_warmup", "trainer.max_critic_ckpt_to_keep",
              f"{_A}.policy_loss.kl_cov_ratio", f"{_A}.policy_loss.ppo_kl_coef", "*max_token_len*"),
        skip=_SIZES,
        values={"trainer.critic_warmup": 0, "trainer.max_critic_ckpt_to_keep": 2},
    ),
    Group(
        "lora_hf_local_bypass_rloo_dapo_dro",
        context=["actor_rollout_ref.model.lora_rank=4", f"{_R}.name=hf", "trainer.worker_backend=local",
                 "algorithm.rollout_correction.bypass_mode=true", *_OLD_LOG_PROBS, "algorithm.adv_estimator=rloo",
                 "reward.reward_manager=dapo", "reward.overlong_buffer.enable=true",
                 f"{_A}.policy_loss.loss_mode=dro", f"{_A}.policy_loss.dro_beta=0.5"],
        keys=("actor_rollout_ref.model.lora_*", "actor_rollout_ref.model.target_modules",
              "actor_rollout_ref.model.exclude_modules", f"{_R}.micro_batch_size", f"{_R}.lora_sync",
              "reward.overlong_buffer.*"),
    ),
    Group(
        "multi_turn_reinforce_pp",
        context=[f"{_R}.multi_turn.enable=true", f"{_R}.agent.default_agent_loop=tool_agent",
                 f"{_R}.multi_turn.tool_config_path={{assets}}/files/tools.yaml",
                 f"{_R}.multi_turn.function_tool_path={{assets}}/files/function_tools.py",
                 "algorithm.adv_estimator=reinforce_plus_plus"],
        keys=(f"{_R}.multi_turn.*", f"{_R}.agent.*", "algorithm.gamma"),
        values={f"{_R}.multi_turn.max_user_turns": NO_VALUE},  # no interaction: user turns come from tools
    ),
    Group(
        "reward_model_pool_custom_files",
        context=["reward.reward_model.enable=true", "reward.reward_model.model.path={assets}/tiny_rm",
                 "reward.reward_model.micro_batch_size_per_gpu=16", "reward.reward_model.enable_resource_pool=true",
                 "reward.reward_model.nnodes=1", "reward.reward_model.n_gpus_per_node=1",
                 "reward.custom_reward_function.path={assets}/files/reward_fn.py",
                 "data.custom_cls.path={assets}/files/dataset_cls.py", "data.custom_cls.name=AuditDataset"],
        keys=("reward.reward_model.*", "reward.custom_reward_function.*"),
        skip=_SIZES,
    ),
    Group(
        "two_workers",
        context=["trainer.n_gpus_per_node=2", f"{_A}.ppo_micro_batch_size_per_gpu=64", *_OLD_LOG_PROBS,
                 f"{_A}.use_kl_loss=true", "algorithm.adv_estimator=gae", "actor_rollout_ref.model.use_remove_padding=true",
                 "critic.model.use_remove_padding=true"],
        keys=("*ulysses_sequence_parallel_size", "*.fsdp_size", "*.reshard_after_forward", f"{_R}.layered_summon"),
        values={f"{_A}.fsdp_config.fsdp_size": 1, "critic.model.fsdp_config.fsdp_size": 1,
                "actor_rollout_ref.ref.fsdp_config.fsdp_size": 1},
    ),
    Group(
        "megatron",
        context=[f"{_A}.strategy=megatron", "critic.strategy=megatron", "algorithm.adv_estimator=gae",
                 f"{_A}.use_kl_loss=true", *_OLD_LOG_PROBS, "trainer.n_gpus_per_node=2",
                 f"{_A}.ppo_micro_batch_size_per_gpu=64"],
        keys=("*.megatron.*",),
        values={f"{_A}.megatron.tensor_model_parallel_size": 2, f"{_A}.megatron.pipeline_model_parallel_size": 1,
                f"{_A}.megatron.context_parallel_size": 1, f"{_A}.megatron.expert_model_parallel_size": 1,
                "critic.megatron.tensor_model_parallel_size": 2, "critic.megatron.pipeline_model_parallel_size": 1,
                "critic.megatron.context_parallel_size": 1, "critic.megatron.expert_model_parallel_size": 1,
                f"{_A}.megatron.virtual_pipeline_model_parallel_size": NO_VALUE,
                "critic.megatron.virtual_pipeline_model_parallel_size": NO_VALUE},
    ),
]


MAIN_ENTRY = Entry(
    name="main_ppo",
    target="verl.trainer.main_ppo:main",
    schema_path="verl.trainer.config:PPOTrainerConfig",
    check=main_check,
    base=MAIN_BASE,
    assets=main_assets,
    groups=MAIN_GROUPS,
)
