"""The recipe's entry point, ``verl-retool``.

    uv run --package verl-recipe-retool verl-retool [key=value ...]
        CPU default (configs/retool_cpu.yaml): the built-in products task, a tiny Qwen2 cold-started on
        tool-using traces, then DAPO with the code interpreter in a local sandbox.
    uv run --package verl-recipe-retool verl-retool retool.use_tool=false [key=value ...]
        The A/B's no-tool arm: same budget, cold start on direct answers, no tool in rollouts.
    uv run --package verl-recipe-retool verl-retool --config recipes/retool/configs/retool_qwen2.5_7b.yaml [key=value ...]
        The paper's setting on GPUs (vLLM, SandboxFusion; set the data files, the SFT'd model path and
        the SandboxFusion URL in configs/tool_config/sandbox_fusion.yaml).

Config order (later wins): core's defaults < ``--config`` files (the CPU default when none is given) <
``key=value`` overrides, over core's schema plus ``retool.*`` (`verl_recipe_retool.config`). Training is
core's ``run_ppo`` (DAPO's dynamic sampling is core's ``filter`` stage, ``algorithm.filter_groups``);
generation is verl-agent's ``tool_agent`` (the agent worker runs it); the reward is the ``naive`` manager
with the task's exact-match scorer.

What the CPU default leaves unset is made before validation, under ``{trainer.default_local_dir}/assets``
(reused when already there): ``data.*_files`` (`verl_recipe_retool.task`), ``actor_rollout_ref.model.path``
(`verl_recipe_retool.cold_start`) and, with the tool, ``multi_turn.tool_config_path`` (the shipped
``configs/tool_config/code_interpreter_local.yaml``: the local sandbox).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from omegaconf import DictConfig, OmegaConf
from verl.trainer.config.recipes import load_with_built_in, recipe_configs_dir
from verl.trainer.config.recipes import with_default_config as _with_default_config

CPU_CONFIG = "retool_cpu.yaml"
PAPER_CONFIG = "retool_qwen2.5_7b.yaml"
LOCAL_TOOL_CONFIG = "tool_config/code_interpreter_local.yaml"
TOOL_KEY = "actor_rollout_ref.rollout.multi_turn.tool_config_path"


def configs_dir() -> Path:
    """The recipe's configs: inside the package in a wheel, ``recipes/retool/configs`` in the repo."""
    return recipe_configs_dir(__file__)


def with_default_config(argv: list[str]) -> list[str]:
    """Prepend ``--config <CPU default>`` unless the command line names a config file."""
    return _with_default_config(argv, configs_dir() / CPU_CONFIG)


def asset_overrides(cfg: DictConfig) -> list[str]:
    """``key=value`` overrides for what the config leaves unset, making the assets on first use."""
    from verl.utils.dataset import write_parquet

    from verl_recipe_retool import task
    from verl_recipe_retool.cold_start import build_cold_start_model

    rt = cfg.retool
    root = Path(cfg.trainer.default_local_dir).resolve() / "assets"
    out: list[str] = []
    if rt.use_tool and not OmegaConf.select(cfg, TOOL_KEY):
        out.append(f"{TOOL_KEY}={configs_dir() / LOCAL_TOOL_CONFIG}")
    # The cold start trains on the train split's problems (the held-out split is never seen).
    train_rows, test_rows = task.split_rows(
        rt.task_train_size, rt.task_test_size, cfg.data.seed, rt.task_digits
    )
    if not cfg.data.train_files:
        name = f"data_d{rt.task_digits}_{rt.task_train_size}_{rt.task_test_size}_seed{cfg.data.seed}"
        train, test = root / name / "train.parquet", root / name / "test.parquet"
        if not (train.is_file() and test.is_file()):
            write_parquet(train_rows, train)
            write_parquet(test_rows, test)
        out += [f"data.train_files={train}", f"data.val_files={test}"]
    if not cfg.actor_rollout_ref.model.path:
        kind = "tool" if rt.use_tool else "direct"
        model_dir = root / f"tiny_qwen2_{kind}_sft{rt.cold_start_steps}_d{rt.task_digits}"
        if not (model_dir / "config.json").is_file():
            print(f"cold start: building the tiny model in {model_dir}", flush=True)
            build_cold_start_model(
                model_dir, train_rows, cfg.actor_rollout_ref.rollout, rt.cold_start_steps, rt.use_tool
            )
        out.append(f"actor_rollout_ref.model.path={model_dir}")
    return out


def load_recipe_config(argv: list[str]) -> DictConfig:
    """Load (CPU default when no ``--config``), check everything the user set before making assets, make
    what is unset, validate. The result is read-only."""
    from verl_recipe_retool.config import load_retool_config, validate_retool_config

    def made(cfg: DictConfig) -> list[str]:
        keys = ["data.train_files", "data.val_files", "actor_rollout_ref.model.path"]
        return [*keys, TOOL_KEY] if cfg.retool.use_tool else keys

    def overrides(cfg: DictConfig, _unset: list[str]) -> list[str]:
        extra = asset_overrides(cfg)
        tools = OmegaConf.select(cfg, TOOL_KEY)
        if tools and not Path(tools).is_absolute() and Path(tools).is_file():
            # Ray workers load the file in their own processes, possibly elsewhere: pass it by absolute path.
            extra.append(f"{TOOL_KEY}={Path(tools).resolve()}")
        return extra

    return load_with_built_in(
        with_default_config(argv), load_retool_config, validate_retool_config, made, overrides
    )


def run_retool(cfg: DictConfig) -> dict[str, float]:
    """Train with a validated config through core's ``run_ppo``; the last step's metrics."""
    from verl.trainer.main_ppo import run_ppo

    import verl_recipe_retool.plugin  # noqa: F401  (the scorer, in the driver where the reward runs)

    return run_ppo(cfg)


def train(argv: list[str]) -> dict[str, float]:
    return run_retool(load_recipe_config(argv))


def main(argv: list[str] | None = None) -> None:
    """The ``verl-retool`` console script (returns None: a returned value would become the exit status)."""
    # Under `uv run`, Ray would rebuild the environment for its workers; they share the driver's.
    os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
    metrics = train(list(sys.argv[1:] if argv is None else argv))
    shown = {
        k: round(v, 4)
        for k, v in metrics.items()
        if k.startswith("val-") and ("/acc/" in k or "tool_correct" in k)
    }
    print(f"ReTool finished at step {metrics.get('training/global_step')}: {shown}", flush=True)


if __name__ == "__main__":
    main()
