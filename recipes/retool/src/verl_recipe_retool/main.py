"""The recipe's entry point, ``verl-retool``.

    uv run --package verl-recipe-retool verl-retool [key=value ...]
        CPU default (configs/retool_cpu.yaml): the built-in products task, a tiny Qwen2 cold-started on
        tool-using traces, then DAPO with the code interpreter in a local sandbox.
    uv run --package verl-recipe-retool verl-retool retool.use_tool=false [key=value ...]
        The A/B's no-tool arm: same budget, cold start on direct answers, no tool in rollouts.
    uv run --package verl-recipe-retool verl-retool --config recipes/retool/configs/retool_qwen2.5_7b.yaml [key=value ...]
        The paper's setting on GPUs (vLLM, SandboxFusion; set the data files, the SFT'd model path and
        the SandboxFusion URL in configs/tool_config/sandbox_fusion.yaml).

The config is core's schema plus ``retool.*`` (`verl_recipe_retool.config`). Training is core's recipe
runner (DAPO's dynamic sampling is core's ``filter`` stage, ``algorithm.filter_groups``); generation is
verl-agent's ``tool_agent`` (the agent worker runs it); the reward is the ``naive`` manager with upstream's
ReTool reward (``retool.reward``) and the data go through upstream's dataset step (``retool.answer_format``),
both wired by `verl_recipe_retool.config.retool_overrides`.

What the CPU default leaves unset is made before validation, under ``{trainer.default_local_dir}/assets``
(reused when already there): ``data.*_files`` (`verl_recipe_retool.task`), ``actor_rollout_ref.model.path``
(`verl_recipe_retool.cold_start`) and, with the tool, ``multi_turn.tool_config_path`` (the shipped
``configs/tool_config/code_interpreter_local.yaml``: the local sandbox).
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, OmegaConf
from verl.trainer.recipe_runner import BuiltIn, Recipe

from verl_recipe_retool.config import (
    ReToolTrainerConfig,
    load_retool_config,
    retool_overrides,
    validate_retool_config,
)

CPU_CONFIG = "retool_cpu.yaml"
PAPER_CONFIG = "retool_qwen2.5_7b.yaml"
LOCAL_TOOL_CONFIG = "tool_config/code_interpreter_local.yaml"
TOOL_KEY = "actor_rollout_ref.rollout.multi_turn.tool_config_path"


def built_in(cfg: DictConfig, built: BuiltIn) -> list[str]:
    """``key=value`` overrides for what the config leaves unset, making the assets on first use, and the
    keys that wire ``retool.reward`` / ``retool.answer_format`` (`retool_overrides`)."""
    from verl.utils.dataset import write_parquet

    from verl_recipe_retool import task
    from verl_recipe_retool.cold_start import build_cold_start_model

    rt = cfg.retool
    out: list[str] = []
    if rt.use_tool and not OmegaConf.select(cfg, TOOL_KEY):
        out.append(f"{TOOL_KEY}={RECIPE.configs_dir / LOCAL_TOOL_CONFIG}")
    # The cold start trains on the train split's problems (the held-out split is never seen).
    train_rows, test_rows = task.split_rows(
        rt.task_train_size, rt.task_test_size, cfg.data.seed, rt.task_digits
    )
    if not cfg.data.train_files:
        name = f"data_d{rt.task_digits}_{rt.task_train_size}_{rt.task_test_size}_seed{cfg.data.seed}"
        train, test = built.root / name / "train.parquet", built.root / name / "test.parquet"
        if not (train.is_file() and test.is_file()):
            write_parquet(train_rows, train)
            write_parquet(test_rows, test)
        out += [f"data.train_files={train}", f"data.val_files={test}"]
    if not cfg.actor_rollout_ref.model.path:
        from verl_recipe_retool.dataset import with_answer_format

        kind = "tool" if rt.use_tool else "direct"
        prompts = "fmt" if rt.answer_format else "raw"  # the cold start sees the prompts RL will see
        source = f"_data{_digest(rt.cold_start_data)}" if rt.cold_start_data else ""
        model_dir = built.root / f"tiny_qwen2_{kind}_boxed_{prompts}{source}_sft{rt.cold_start_steps}_d{rt.task_digits}"
        if not (model_dir / "config.json").is_file():
            print(f"cold start: building the tiny model in {model_dir}", flush=True)
            rows = [with_answer_format(r) for r in train_rows] if rt.answer_format else train_rows
            build_cold_start_model(
                model_dir, rows, cfg.actor_rollout_ref.rollout, rt.cold_start_steps, rt.use_tool,
                sft_data=rt.cold_start_data,
            )
        out.append(f"actor_rollout_ref.model.path={model_dir}")
    return out + retool_overrides(cfg)


def _digest(path: str) -> str:
    import hashlib

    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:12]


def made(cfg: DictConfig) -> list[str]:
    """The keys the built-in assets fill: the data, the model and, with the tool, the tool config."""
    keys = ["data.train_files", "data.val_files", "actor_rollout_ref.model.path"]
    return [*keys, TOOL_KEY] if cfg.retool.use_tool else keys


RECIPE = Recipe(
    "retool", __file__, load=load_retool_config, validate=validate_retool_config, built_in=built_in, made=made,
    absolute_paths=(TOOL_KEY,), plugins=("verl_recipe_retool.plugin",),  # the scorer, in the driver
    summary=("val-*/acc/*", "val-*tool_correct*"), schema=ReToolTrainerConfig, about=__doc__,
)
