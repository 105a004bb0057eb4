"""The driver's import graph: ``main_ppo.build_trainer`` for a text-only GRPO run loads what the driver
uses (torch for DataProto, Ray, the tokenizer, pandas/pyarrow for the parquet rows) and none of the
stacks only the workers need (transformers' processor/model classes and the torch compile stack they
pull: accelerate, sympy, triton, torch._dynamo), nor the optional engines and plotting libraries.
The driver's resident memory is these imports; every one of them costs it tens of MiB."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

#: modules the driver of a text-only run must not hold after ``build_trainer``
DRIVER_MUST_NOT_IMPORT = (
    "accelerate",
    "sympy",
    "triton",
    "torch._dynamo",
    "torch._inductor",
    "transformers.models.auto.processing_auto",
    "transformers.modeling_utils",
    "transformers.models.qwen2_vl",
    "verl.workers.tiny_vlm",
    "vllm",
    "sglang",
    "matplotlib",
    "datasets",
)


def _driver_modules(model_dir: str, train_file: str, out_dir: str, extra: tuple[str, ...] = ()) -> dict:
    """Build the trainer in a fresh interpreter (the driver's own process) and report which of the
    watched modules it imported; also that a few it must use are there (the check can fail both ways)."""
    script = textwrap.dedent(
        f"""
        import json, os, sys
        os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
        import ray
        from verl.trainer.config import load_config, validate_config
        from verl.trainer.main_ppo import build_trainer

        cfg = load_config([
            "data.train_files={train_file}", "data.train_batch_size=2", "data.max_prompt_length=32",
            "data.max_response_length=4", "actor_rollout_ref.model.path={model_dir}",
            "actor_rollout_ref.rollout.n=2", "actor_rollout_ref.actor.ppo_mini_batch_size=2",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
            "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4", "algorithm.adv_estimator=grpo",
            "trainer.device=cpu", "trainer.nnodes=1", "trainer.n_gpus_per_node=1",
            "trainer.total_training_steps=1", "trainer.logger=[console]", "trainer.val_before_train=false",
            "trainer.default_local_dir={out_dir}", *{list(extra)!r},
        ])
        validate_config(cfg)
        # the pools are sized from the cluster's CPUs: a small local cluster of this process's own
        ray.init(address="local", num_cpus=1, include_dashboard=False, configure_logging=False)
        try:
            trainer = build_trainer(cfg)
        finally:
            ray.shutdown()
        watched = {list(DRIVER_MUST_NOT_IMPORT)!r} + ["torch", "transformers", "pyarrow", "verl.workers"]
        print("MODULES " + json.dumps({{m: m in sys.modules for m in watched}}))
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("MODULES "))
    return json.loads(line.removeprefix("MODULES "))


@pytest.fixture(scope="module")
def train_file(tmp_path_factory) -> str:
    from verl.utils.dataset import write_parquet
    from verl.utils.dataset.tasks import make_arithmetic_rows

    path = tmp_path_factory.mktemp("driver_rows") / "train.parquet"
    return str(write_parquet(make_arithmetic_rows(4, seed=0, digits=1, split="train"), path))


def test_text_only_driver_skips_worker_only_stacks(tiny_model_dir, train_file, tmp_path):
    loaded = _driver_modules(tiny_model_dir, train_file, str(tmp_path / "out"))
    # what the driver uses is loaded: the check sees real imports
    assert loaded["torch"] and loaded["transformers"] and loaded["pyarrow"] and loaded["verl.workers"]
    heavy = sorted(m for m in DRIVER_MUST_NOT_IMPORT if loaded[m])
    assert not heavy, f"the driver imported {heavy} building a text-only trainer"


def test_processor_skipped_only_for_folders_without_one(tiny_model_dir, tmp_path):
    import shutil

    from verl.workers.tokenizer import _has_no_processor

    assert _has_no_processor(tiny_model_dir)
    # a processor config in the folder, or a processor class named by the tokenizer config, means
    # AutoProcessor must look (a vision-language model)
    with_image = tmp_path / "with_image"
    shutil.copytree(tiny_model_dir, with_image)
    (with_image / "preprocessor_config.json").write_text("{}")
    assert not _has_no_processor(str(with_image))
    named = tmp_path / "named"
    shutil.copytree(tiny_model_dir, named)
    tok_cfg = json.loads((named / "tokenizer_config.json").read_text())
    (named / "tokenizer_config.json").write_text(
        json.dumps({**tok_cfg, "processor_class": "Qwen2VLProcessor"})
    )
    assert not _has_no_processor(str(named))
    # a hub name (not a local folder) is left to AutoProcessor
    assert not _has_no_processor("Qwen/Qwen2-VL-2B-Instruct")
