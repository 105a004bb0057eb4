"""The ``distillation`` section: on-policy distillation from one or more frozen teachers (upstream verl
0.9.1's ``verl/trainer/config/distillation/distillation.yaml``, its names and defaults).

The teachers run as their own worker role on a pool of ``nnodes x n_gpus_per_node`` workers (CPU worker
processes with ``trainer.device=cpu``), each teacher on ``num_replicas x inference.tensor_model_parallel_size
x inference.data_parallel_size`` of them; every row goes to the teacher whose ``key`` equals the row's
``teacher_key`` column (one teacher: every row). ``teacher_models`` is an open dict of named entries,
checked here field by field against `TeacherModelConfig` (typos are errors with a did-you-mean). See
docs/distillation.md.

Our additions to upstream's keys (upstream has none for them): ``distillation_loss.jsd_beta`` (upstream's
earlier name) and ``distillation_loss.lmbda`` (GKD's), and ``teacher_models.<name>.privileged_context``.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from verl.trainer.config.fields import ConfigError, field_problems, opt, section, when
from verl.utils.torch_dtypes import DTYPE_NAMES

_ON = when("distillation.enabled")  # every other key of the section is read only with the teachers on


def _rollout(key: str) -> str:
    # upstream's mirror of the student's rollout setting
    return "${oc.select:actor_rollout_ref.rollout." + key + "}"


@dataclass
class DistillationLossConfig:
    """``distillation.distillation_loss``: the divergence and how it enters the actor's loss."""

    loss_mode: str = opt("k3", "divergence: k1|kl, k2|mse, k3|low_var_kl, abs (reverse KL estimated on the "
                                 "sampled token), forward_kl_topk, jsd_topk (over the teacher's top-k)")
    topk: int = opt(32, "teacher log-probs kept per token for forward_kl_topk / jsd_topk",
                    when=when(".loss_mode", "forward_kl_topk", "jsd_topk"))
    use_task_rewards: bool = opt(True, "add the task's policy loss (outcome reward) to the distillation term")
    distillation_loss_coef: float = opt(1.0, "weight of the distillation term when use_task_rewards",
                                        when=when(".use_task_rewards"))
    loss_max_clamp: float | None = opt(None, "clamp the per-token divergence to [-c, c] (null: no clamp)")
    log_prob_min_clamp: float | None = opt(None, "floor of the top-k log-probs of both models (null: none)")
    use_policy_gradient: bool = opt(False, "the negative divergence is a dense per-token reward through "
                                             "policy_loss_mode (else it is back-propagated directly)")
    policy_loss_mode: str = opt("vanilla", "policy loss of the policy-gradient variant (upstream: vanilla)",
                                refused="the policy-gradient variant uses the PPO loss (vanilla) with this "
                                "section's clip_ratio*, as upstream")
    clip_ratio: float = opt(0.2, "PPO clip of the policy-gradient variant")
    clip_ratio_low: float = opt(0.2, "lower PPO clip of the policy-gradient variant")
    clip_ratio_high: float = opt(0.2, "upper PPO clip of the policy-gradient variant")
    jsd_beta: float = opt(0.5, "jsd_topk: mixture weight b of GKD's generalised JSD (0: forward KL, 1: reverse KL)",
                          when=when(".loss_mode", "jsd_topk"))
    lmbda: float = opt(1.0, "GKD's on-policy fraction: the other rows train on reward_model.ground_truth as "
                              "the response (supervised losses only)")


#: why the vLLM/SGLang engine settings of a teacher are accepted at upstream's defaults only
_ENGINE_ONLY = (
    "a vLLM/SGLang engine setting; the teacher runs the training engine's forward pass, which does not read it"
)


def _engine_only(default: Any) -> Any:
    return opt(default, "vLLM/SGLang only", refused=_ENGINE_ONLY)


@dataclass
class TeacherInferenceConfig:
    """``teacher_models.<name>.inference``: upstream's rollout settings of the teacher. The teacher runs on
    the training engine's forward (``name`` hf or native); the vLLM/SGLang engine settings are accepted at
    upstream's defaults only."""

    name: str = opt(_rollout("name"), "hf | native: the teacher runs the training engine's forward pass")
    dtype: str = opt(_rollout("dtype"), "the teacher's compute dtype", choices=tuple(DTYPE_NAMES))
    gpu_memory_utilization: float = _engine_only(0.5)
    enforce_eager: bool = _engine_only(True)
    cudagraph_capture_sizes: Any = _engine_only(None)
    free_cache_engine: bool = _engine_only(True)
    data_parallel_size: int = opt(1, "workers per replica (x tensor_model_parallel_size)")
    expert_parallel_size: int = _engine_only(1)
    tensor_model_parallel_size: int = opt(2, "workers per replica; the hf teacher shards its weights over "
                                               "all of its workers (FSDP) instead of tensor parallelism")
    max_num_batched_tokens: int = _engine_only(8192)
    max_model_len: int | None = opt(None, "longest teacher input (prompt, privileged context, response)")
    max_num_seqs: int = opt(1024, "rows per teacher forward pass (per worker)")
    load_format: str = _engine_only("auto")
    engine_kwargs: dict[str, Any] = _engine_only({})
    limit_images: Any = _engine_only(None)
    enable_chunked_prefill: bool = _engine_only(True)
    enable_prefix_caching: bool = _engine_only(True)
    disable_log_stats: bool = _engine_only(True)
    skip_tokenizer_init: bool = _engine_only(True)
    prompt_length: int = opt(_rollout("prompt_length"), "the student's prompt length (a mirror)")
    response_length: int = opt(_rollout("response_length"), "the student's response length (a mirror)")
    temperature: float = opt(_rollout("temperature"), "the teacher's log-probs are of logits / temperature")


@dataclass
class PrivilegedContextConfig:
    """``teacher_models.<name>.privileged_context`` (ours): text only the teacher sees, for on-policy
    self-distillation (the teacher is the student's start, conditioned on e.g. the ground truth)."""

    key: str | None = opt(None, "dotted row field holding the text, e.g. reward_model.ground_truth (null: off)")
    template: str = opt("{solution}", "the text inserted, {solution} replaced by the field's value")
    position: str = opt("after_prompt", "after_prompt (between the prompt and the response, upstream's "
                                          "layout) | before_prompt", choices=("after_prompt", "before_prompt"))


@dataclass
class TeacherModelConfig:
    """One entry of ``distillation.teacher_models``."""

    key: str | None = opt(None, "the teacher_key value of the rows this teacher scores (several teachers)")
    model_path: str | None = opt(None, "the teacher model (Hugging Face layout); same vocabulary as the student")
    num_replicas: int = opt(0, "replicas of this teacher (one teacher: 0 = the whole pool)")
    inference: TeacherInferenceConfig = section(TeacherInferenceConfig)
    privileged_context: PrivilegedContextConfig = section(PrivilegedContextConfig)


@dataclass
class DistillationConfig:
    """``distillation``: on-policy distillation (the student samples, frozen teachers give log-probs)."""

    enabled: bool = opt(False, "train the actor on the teachers' log-probs of its own samples")
    n_gpus_per_node: int = opt(8, "teacher pool: workers per node", when=_ON)
    nnodes: int = opt(0, "teacher pool: nodes", when=_ON)
    teacher_models: dict[str, Any] = opt(
        {"teacher_model": dataclasses.asdict(TeacherModelConfig())},
        "named teachers (open dict: +distillation.teacher_models.<name>.model_path=...)",
    )
    teacher_key: str = opt("data_source", "row column whose value picks the teacher (several teachers)", when=_ON)
    distillation_loss: DistillationLossConfig = section(DistillationLossConfig, when=_ON)


TEACHER_ENGINES = ("hf", "native")
_SECTION = "distillation"
_DEFAULT_ENTRY = "teacher_model"


def distillation_enabled(cfg: DictConfig) -> bool:
    return bool(cfg.get("distillation") is not None and cfg.distillation.enabled)


def _entry(cfg: DictConfig, name: str, raw: Any, problems: list[str]) -> DictConfig | None:
    """One ``teacher_models`` entry merged over `TeacherModelConfig`'s defaults, mirrors resolved."""
    where = f"{_SECTION}.teacher_models.{name}"
    data = OmegaConf.to_container(raw, resolve=True) if OmegaConf.is_config(raw) else raw
    if not isinstance(data, dict):
        problems.append(f"{where} must be a section of teacher settings, got {data!r}")
        return None
    bad = _unknown_keys(data, TeacherModelConfig, where)
    if bad:
        problems.extend(bad)
        return None
    try:
        merged = OmegaConf.merge(OmegaConf.structured(TeacherModelConfig), data)
        holder = OmegaConf.create({"actor_rollout_ref": {"rollout": OmegaConf.to_container(
            cfg.actor_rollout_ref.rollout, resolve=True)}, "t": OmegaConf.to_container(merged)})
        OmegaConf.resolve(holder)
    except OmegaConfBaseException as e:
        problems.append(f"{where}: {str(e).strip().splitlines()[0]}")
        return None
    return holder.t


def _unknown_keys(data: dict, schema: type, where: str) -> list[str]:
    fields = {f.name: f for f in dataclasses.fields(schema)}
    out = []
    for k, v in data.items():
        if k not in fields:
            close = difflib.get_close_matches(str(k), list(fields), n=1)
            hint = f"; did you mean {where}.{close[0]}?" if close else f"; known: {', '.join(fields)}"
            out.append(f"unknown key {where}.{k}{hint}")
        elif isinstance(v, dict) and dataclasses.is_dataclass(fields[k].default_factory()
                                                              if fields[k].default_factory is not dataclasses.MISSING
                                                              else None):
            out += _unknown_keys(v, type(fields[k].default_factory()), f"{where}.{k}")
    return out


def per_replica_size(teacher: DictConfig) -> int:
    return int(teacher.inference.tensor_model_parallel_size) * int(teacher.inference.data_parallel_size)


def resolve_teachers(cfg: DictConfig, problems: list[str] | None = None) -> dict[str, DictConfig]:
    """The teachers of an enabled ``distillation`` section by entry name, each with ``key``, ``model_path``,
    ``num_replicas`` (one teacher: the pool divided by its replica size), ``world_size`` and its settings.

    With several entries, the default entry ``teacher_model`` is dropped while it is still a placeholder
    (no ``model_path``); set there, it is a teacher like the others (upstream drops it silently)."""
    own = problems if problems is not None else []
    d = cfg.distillation
    entries = {str(name): _entry(cfg, str(name), raw, own) for name, raw in d.teacher_models.items()}
    if len(entries) > 1 and entries.get(_DEFAULT_ENTRY) is not None and entries[_DEFAULT_ENTRY].model_path is None:
        del entries[_DEFAULT_ENTRY]
    teachers = {name: t for name, t in entries.items() if t is not None}
    pool = int(d.nnodes) * int(d.n_gpus_per_node)
    if len(teachers) == 1:
        (name, t), = teachers.items()
        per = per_replica_size(t)
        if per > 0 and pool % per == 0 and int(t.num_replicas) in (0, pool // per):
            t.num_replicas = pool // per
        elif per > 0:
            own.append(
                f"{_SECTION}: one teacher ({name}) takes the whole pool of nnodes x n_gpus_per_node = {pool} workers "
                f"in replicas of inference.tensor_model_parallel_size x data_parallel_size = {per}; "
                + (f"{per} does not divide {pool}" if pool % per else
                   f"its num_replicas={t.num_replicas} would need {int(t.num_replicas) * per} (set 0 or {pool // per})")
            )
    for t in teachers.values():
        t.world_size = int(t.num_replicas) * per_replica_size(t)
    if problems is None and own:
        raise ConfigError(own)
    return teachers


def check_distillation(cfg: DictConfig, problems: list[str], loss_settings: Callable[[str], Any]) -> None:
    """Every problem of an enabled ``distillation`` section, in the user's terms (called by validate_config;
    ``loss_settings(loss_mode)``: the divergence registry's settings, raising for an unknown name)."""
    if not distillation_enabled(cfg):
        return
    d = cfg.distillation
    _check_loss(cfg, d.distillation_loss, problems, loss_settings)
    for key in ("nnodes", "n_gpus_per_node"):
        if int(d[key]) < 1:
            problems.append(
                f"{_SECTION}.{key}={d[key]}: distillation.enabled=true needs a teacher pool of at least one worker "
                f"(upstream's default nnodes=0 means no pool; e.g. distillation.nnodes=1 distillation.n_gpus_per_node=1)"
            )
    before = len(problems)
    teachers = resolve_teachers(cfg, problems)
    if not teachers:
        if len(problems) == before:  # else an entry's own problem says why
            problems.append(f"{_SECTION}.teacher_models has no teacher; set {_SECTION}.teacher_models.teacher_model.model_path")
        return
    pool = int(d.nnodes) * int(d.n_gpus_per_node)
    several = len(teachers) > 1
    keys: dict[str, str] = {}
    for name, t in teachers.items():
        _check_teacher(cfg, name, t, several, int(d.n_gpus_per_node), problems)
        if several and t.key is not None:
            if str(t.key) in keys:
                problems.append(f"{_SECTION}.teacher_models.{name}.key={t.key!r} is also {keys[str(t.key)]}'s key")
            keys[str(t.key)] = name
    total = sum(int(t.world_size) for t in teachers.values())
    if several and total != pool:
        sizes = ", ".join(f"{n}: {t.num_replicas} x {per_replica_size(t)}" for n, t in teachers.items())
        problems.append(
            f"{_SECTION}: the teachers need {total} workers ({sizes}; num_replicas x tensor_model_parallel_size x "
            f"data_parallel_size) but the pool has nnodes x n_gpus_per_node = {pool}; make them equal"
        )
    if cfg.trainer.worker_backend == "local" and pool != 1:
        problems.append(
            f"trainer.worker_backend=local runs every worker in the driver's process, one per role; the teacher pool "
            f"has {pool} workers: set {_SECTION}.nnodes=1 {_SECTION}.n_gpus_per_node=1 or use trainer.worker_backend=ray"
        )
    actor = cfg.actor_rollout_ref.actor
    for key, strategy in (("actor_rollout_ref.actor.strategy", actor.strategy),
                          ("actor_rollout_ref.ref.strategy", cfg.actor_rollout_ref.ref.strategy)):
        if strategy not in ("fsdp2", "fsdp"):
            problems.append(
                f"{key}={strategy}: on-policy distillation runs on the fsdp2/fsdp engines (the student's loss and the "
                "teacher's forward, which uses the reference's engine settings); megatron is not wired for it"
            )


def _check_loss(cfg: DictConfig, loss: DictConfig, problems: list[str], loss_settings: Callable[[str], Any]) -> None:
    where = f"{_SECTION}.distillation_loss"
    try:
        settings = loss_settings(str(loss.loss_mode))
    except (KeyError, ValueError) as e:
        problems.append(f"{where}.loss_mode={loss.loss_mode!r}: {e.args[0] if e.args else e}")
        return
    if str(loss.loss_mode) in ("k1", "kl") and not loss.use_policy_gradient:
        problems.append(
            f"{where}.loss_mode={loss.loss_mode} with use_policy_gradient=false: k1's gradient does not depend on the "
            "teacher (d(log p_S - log p_T) = d log p_S); use it as a reward (use_policy_gradient=true) or use k3"
        )
    if settings.use_topk and int(loss.topk) < 1:
        problems.append(f"{where}.topk={loss.topk} must be >= 1 for loss_mode={loss.loss_mode}")
    if settings.use_topk:
        model = cfg.actor_rollout_ref.model
        if model.use_fused_kernels:
            problems.append(
                f"{where}.loss_mode={loss.loss_mode} reads the student's log-probs at the teacher's top-k tokens, "
                "which the fused LM head (actor_rollout_ref.model.use_fused_kernels=true) never materialises; "
                "set use_fused_kernels=false or use an estimator loss (k3)"
            )
        if int(cfg.actor_rollout_ref.actor.ulysses_sequence_parallel_size) > 1:
            problems.append(
                f"{where}.loss_mode={loss.loss_mode} with Ulysses sequence parallelism is not implemented; "
                "use an estimator loss (k3) or ulysses_sequence_parallel_size=1"
            )
    if not 0.0 <= float(loss.jsd_beta) <= 1.0:
        problems.append(f"{where}.jsd_beta={loss.jsd_beta} must be in [0, 1]")
    if not 0.0 <= float(loss.lmbda) <= 1.0:
        problems.append(f"{where}.lmbda={loss.lmbda} must be in [0, 1] (the on-policy fraction of rows)")
    if float(loss.lmbda) < 1.0:
        _check_lmbda(cfg, loss, problems)
    if float(loss.distillation_loss_coef) < 0:
        problems.append(f"{where}.distillation_loss_coef={loss.distillation_loss_coef} must be >= 0")
    if loss.loss_max_clamp is not None and float(loss.loss_max_clamp) <= 0:
        problems.append(f"{where}.loss_max_clamp={loss.loss_max_clamp} must be > 0 (or null)")
    if loss.log_prob_min_clamp is not None and float(loss.log_prob_min_clamp) >= 0:
        problems.append(f"{where}.log_prob_min_clamp={loss.log_prob_min_clamp} must be < 0 (a log-prob floor)")
    if loss.use_policy_gradient:
        if not 0.0 < float(loss.clip_ratio_low) < 1.0 or float(loss.clip_ratio_high) <= 0.0:
            problems.append(
                f"{where}.clip_ratio_low={loss.clip_ratio_low} must be in (0, 1) and clip_ratio_high="
                f"{loss.clip_ratio_high} > 0 (the PPO clip of the policy-gradient variant)"
            )


def _check_lmbda(cfg: DictConfig, loss: DictConfig, problems: list[str]) -> None:
    where = f"{_SECTION}.distillation_loss.lmbda={loss.lmbda}"
    if loss.use_policy_gradient:
        problems.append(
            f"{where} trains some rows on the dataset's responses, which the student did not sample; the "
            "policy-gradient variant needs on-policy samples: use a supervised loss (use_policy_gradient=false)"
        )
    arr = cfg.actor_rollout_ref
    if arr.rollout.calculate_log_probs or arr.actor.use_rollout_log_probs or cfg.algorithm.rollout_correction.bypass_mode:
        problems.append(
            f"{where} replaces some responses after generation, so the rollout's log-probs no longer belong to "
            "them; set actor_rollout_ref.rollout.calculate_log_probs=false (the actor computes the old log-probs: "
            "actor.use_rollout_log_probs=false, algorithm.rollout_correction.bypass_mode=false)"
        )
    if arr.rollout.multi_turn.enable:
        problems.append(f"{where}: replacing multi-turn trajectories by a target is not implemented; use lmbda=1")


def _check_teacher(cfg: DictConfig, name: str, t: DictConfig, several: bool, per_node: int,
                   problems: list[str]) -> None:
    where = f"{_SECTION}.teacher_models.{name}"
    inf = t.inference
    if t.model_path is None:
        problems.append(f"{where}.model_path is required (the teacher model's directory)")
    if several and t.key is None:
        problems.append(
            f"{where}.key is required with several teachers: the {cfg.distillation.teacher_key} value of the rows it scores"
        )
    if several and int(t.num_replicas) < 1:
        problems.append(f"{where}.num_replicas={t.num_replicas} must be >= 1 with several teachers")
    for key in ("tensor_model_parallel_size", "data_parallel_size", "max_num_seqs"):
        if int(inf[key]) < 1:
            problems.append(f"{where}.inference.{key}={inf[key]} must be >= 1")
    world = int(t.world_size)
    if world > per_node and world % per_node:
        problems.append(
            f"{where} takes {world} workers, which neither fit one node nor fill whole nodes of "
            f"{_SECTION}.n_gpus_per_node={per_node}"
        )
    if inf.name not in TEACHER_ENGINES:
        problems.append(
            f"{where}.inference.name={inf.name!r}: the teacher runs the training engine's forward pass "
            f"({' | '.join(TEACHER_ENGINES)}); a teacher on vLLM/SGLang (prompt log-probs) is not implemented. "
            f"Set {where}.inference.name=hf (it defaults to actor_rollout_ref.rollout.name)"
        )
    if float(inf.temperature) <= 0:
        problems.append(f"{where}.inference.temperature={inf.temperature} must be > 0")
    rollout = cfg.actor_rollout_ref.rollout
    for key in ("prompt_length", "response_length"):
        if int(inf[key]) != int(rollout[key]):
            problems.append(
                f"{where}.inference.{key}={inf[key]}: the teacher scores the student's prompts and responses, whose "
                f"length is actor_rollout_ref.rollout.{key}={rollout[key]}; leave it following that key"
            )
    needed = int(rollout.prompt_length) + int(rollout.response_length) + 1
    if inf.max_model_len is not None and int(inf.max_model_len) < needed:
        problems.append(
            f"{where}.inference.max_model_len={inf.max_model_len} < prompt + response + 1 = {needed} tokens"
        )
    problems += field_problems(t, TeacherModelConfig, f"{where}.")  # choices and the engine-only refusals
    pc = t.privileged_context
    if pc.key is not None and "{solution}" not in str(pc.template):
        problems.append(
            f"{where}.privileged_context.template={pc.template!r} has no {{solution}} placeholder for the "
            f"value of {pc.key}"
        )
