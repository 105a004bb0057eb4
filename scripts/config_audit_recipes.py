"""`config_audit`'s recipe entries: each recipe's CPU default (its ``RECIPE``, core's recipe runner), shortened,
with assets made small where the recipe's own would take minutes; ``ENTRIES`` lists every entry point,
``main_ppo`` first (`config_audit_entries`)."""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest.mock import patch

from config_audit_entries import MAIN_ENTRY, NO_VALUE, Entry, Group, demo_asset_overrides
from verl.workers.tiny import CHAT_TEMPLATE


def recipe_check(recipe: str) -> Callable[[list[str]], Any]:
    """The recipe's config as its entry point loads it (its CPU default under the arguments), with what its
    built-in would make standing in as core's early check does (`load_with_built_in`), validated."""

    def check(argv: list[str]) -> Any:
        from config_audit import resolve
        from omegaconf import OmegaConf
        from verl.trainer.config.recipes import BUILT_IN

        r = resolve(recipe)
        for module in r.plugins:  # registrations validation looks names up in
            importlib.import_module(module)
        argv = r.with_default_config(argv)
        cfg = r.load(argv)
        unset = [k for k in (r.made(cfg) if callable(r.made) else r.made) if not OmegaConf.select(cfg, k)]
        if unset:
            cfg = r.load([*argv, *(f"{k}={BUILT_IN}" for k in unset)])
        r.validate(cfg)
        return cfg

    return check


def recipe_entry(name: str, recipe: str, base: list[str], groups: list[Group],
                 assets: Callable[[Path], list[str]] | None = None) -> Entry:
    """An entry that runs ``RECIPE.main`` (the console script) over the recipe's schema."""
    return Entry(name=name, target=f"{recipe}.main", schema_path=f"{recipe}.schema", check=recipe_check(recipe),
                 base=base, groups=groups, assets=assets)


# -------------------------------------------------------------------------------------------- assets
@functools.cache
def dapo_assets(root: Path) -> list[str]:
    """DAPO's task and its plain-torch warm start, shortened (the filter needs groups that differ)."""
    from verl_recipe_dapo import cpu_assets

    out = root / "dapo"
    train, test = out / "train.parquet", out / "test.parquet"
    if not test.is_file():
        train, test = cpu_assets.write_task(out)
    model = out / "model"
    if not (model / "config.json").is_file():
        with patch.multiple(cpu_assets, WARM_START_STEPS=40):  # the smoke test's length: about 5-10 % right
            cpu_assets.warm_start_tiny_model(model, train)
    return [f"data.train_files={train}", f"data.val_files={test}", f"actor_rollout_ref.model.path={model}"]


@functools.cache
def collabllm_assets(root: Path) -> list[str]:
    from verl_recipe_collabllm import cpu_assets

    out = root / "collabllm"
    train, test = out / "data" / "train.parquet", out / "data" / "test.parquet"
    if not test.is_file():
        train, test = cpu_assets.write_task(out / "data")
    model = out / "model"
    if not (model / "config.json").is_file():
        cpu_assets.build_warm_model(model, steps=2)
    return [f"data.train_files={train}", f"data.val_files={test}", f"actor_rollout_ref.model.path={model}"]


@functools.cache
def vlm_assets(root: Path) -> list[str]:
    from verl_recipe_vlm_count import cpu_assets

    out = root / "vlm_count"
    out.mkdir(parents=True, exist_ok=True)
    train, test = out / "train.parquet", out / "test.parquet"
    model = out / "model"
    with patch.multiple(cpu_assets, TRAIN_ROWS=16, TEST_ROWS=4, WARM_START_BATCH=8):  # the smoke test's sizes
        if not test.is_file():
            train, test = cpu_assets.write_task(out)
        if not (model / cpu_assets.MARKER).is_file():
            cpu_assets.warm_start(model, cpu_assets.task_rows(16, cpu_assets.TRAIN_SEED, "train"), steps=1)
    return [f"data.train_files={train}", f"data.val_files={test}", f"actor_rollout_ref.model.path={model}"]


# ------------------------------------------------------------------------------------------- entries
#: every recipe's run: one step, few validation prompts, the rest as its CPU default has it
SHORT = ["trainer.total_training_steps=1", "data.val_max_samples=8"]

RECIPE_ENTRIES: list[Entry] = [
    recipe_entry(
        # dynamic sampling keeps only groups whose exact-match score varies, so the probed prompt format must be
        # the one the warm start learnt (the tokenizer's own template, still a value the dataset must read):
        # under another the policy answers nothing right, every group is dropped, and the CPU default's
        # max_num_gen_batches=10 ends the run with core's DynamicSamplingError (upstream's ValueError)
        "dapo", "verl_recipe_dapo.main_dapo:RECIPE",
        base=SHORT,
        assets=dapo_assets,
        # the filter's keys are core's stage's: probed in main_ppo's dynamic_sampling_reward_loop group
        groups=[Group("base", skip=("data.gen_batch_size", "algorithm.filter_groups.*"),
                      values={"actor_rollout_ref.model.custom_chat_template": CHAT_TEMPLATE})],
    ),
    recipe_entry(
        "spin", "verl_recipe_spin.main_spin:RECIPE",
        base=[*SHORT, "data.train_batch_size=4", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
              "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2", "trainer.ref_update_freq=1"],
        assets=demo_asset_overrides,
        groups=[Group("base", skip=("data.train_batch_size",))],
    ),
    recipe_entry(
        "sppo", "verl_recipe_sppo.main_sppo:RECIPE",
        base=[*SHORT, "data.train_batch_size=4", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
              "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16"],
        assets=demo_asset_overrides,
        groups=[Group("base")],
    ),
    recipe_entry(
        "prime", "verl_recipe_prime.main_prime:RECIPE",
        base=SHORT,
        assets=demo_asset_overrides,
        groups=[
            # the PRM on a pool of its own reads what the colocated PRM reads, and its pool's size too (the
            # colocated default runs in the recipe's smoke test)
            Group("base_prm_pool", context=["reward.reward_model.enable_resource_pool=true", "reward.reward_model.nnodes=1",
                                            "reward.reward_model.n_gpus_per_node=1"]),
            Group("rloo_baseline", context=["reward.reward_model.enable=false"], keys=()),
        ],
    ),
    recipe_entry(
        "collabllm", "verl_recipe_collabllm.main:RECIPE",
        base=[*SHORT, "data.train_batch_size=2", "actor_rollout_ref.actor.ppo_mini_batch_size=2",
              "actor_rollout_ref.rollout.n=2"],
        assets=collabllm_assets,
        groups=[Group("base", skip=("data.train_batch_size", "actor_rollout_ref.rollout.n"))],
    ),
    recipe_entry(
        "retool", "verl_recipe_retool.main:RECIPE",
        base=[*SHORT, "retool.cold_start_steps=1", "retool.task_train_size=8", "retool.task_test_size=4",
              "data.train_batch_size=2", "data.gen_batch_size=2", "data.max_response_length=128",
              "actor_rollout_ref.rollout.n=2", "actor_rollout_ref.actor.ppo_mini_batch_size=2",
              "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4", "algorithm.filter_groups.enable=false"],
        groups=[Group("base", skip=("retool.*",)), Group("no_tool", context=["retool.use_tool=false"], keys=())],
    ),
    recipe_entry(
        "vlm_count", "verl_recipe_vlm_count.main:RECIPE",
        base=[*SHORT, "data.train_batch_size=4", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
              "actor_rollout_ref.rollout.n=2", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8"],
        assets=vlm_assets,
        groups=[Group("base", values={"data.image_key": NO_VALUE, "data.video_key": NO_VALUE})],  # the task's columns
    ),
    recipe_entry(
        "fully_async", "verl_recipe_fully_async.main:RECIPE",
        base=["trainer.total_training_steps=2", "data.val_max_samples=8"],
        assets=demo_asset_overrides,
        groups=[Group("base", skip=("async_training.*", "rollout.*")),
                Group("object_store", context=["async_training.weight_sync=object_store"], keys=("async_training.*",))],
    ),
    recipe_entry(
        "one_step_off", "verl_recipe_fully_async.main:ONE_STEP_OFF",
        base=["trainer.total_training_steps=2", "data.val_max_samples=8"],
        assets=demo_asset_overrides,
        groups=[Group("base", keys=())],
    ),
]

#: every entry point the audit runs
ENTRIES: list[Entry] = [MAIN_ENTRY, *RECIPE_ENTRIES]
